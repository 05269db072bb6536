package mvcc

import "github.com/kvd-dev/kvd/pkg/backend"

// Alarm records live in bucket backend.Alarm; pkg/alarms encodes them. Like
// auth and member records they go through the write-back buffer, committed
// with the consistent index of the entry that raised or cleared them.

// PutAlarm stages an alarm record. key must not be modified afterwards.
func (b *Batch) PutAlarm(key []byte) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Alarm, string(key)}, w: auxWrite{value: []byte{}}})
}

// DeleteAlarm stages the removal of an alarm record.
func (b *Batch) DeleteAlarm(key []byte) {
	b.aux = append(b.aux, auxPending{k: auxKey{backend.Alarm, string(key)}, w: auxWrite{del: true}})
}

// AlarmRecords calls fn with the key of every alarm record, in key order.
// It flushes first: for start-up and snapshot installs, not the hot path.
func (s *Store) AlarmRecords(fn func(key []byte) error) error {
	return s.records(backend.Alarm, "alarms", func(k, _ []byte) error { return fn(append([]byte(nil), k...)) })
}
