package mvcc

import (
	"bytes"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kvd-dev/kvd/pkg/fastpb"
)

// The Key bucket's values are mvccpb.KeyValue in protobuf wire format,
// encoded by pkg/fastpb without reflection and decoded here; the bytes are
// what proto.Marshal produces (fields in number order, zero values omitted),
// which codec_test checks, so HashKV stays etcd's.

const (
	fieldKey            = 1
	fieldCreateRevision = 2
	fieldModRevision    = 3
	fieldVersion        = 4
	fieldValue          = 5
	fieldLease          = 6
)

func marshalKV(kv *mvccpb.KeyValue) []byte {
	return fastpb.AppendKeyValue(make([]byte, 0, fastpb.SizeKeyValue(kv)), kv)
}

// unmarshalKV decodes b into kv. Key and Value share one copy of b, so kv
// does not alias b. Unknown fields are skipped.
func unmarshalKV(b []byte, kv *mvccpb.KeyValue) error {
	return decodeKV(bytes.Clone(b), kv)
}

// decodeKV is unmarshalKV with Key and Value aliasing buf: for a caller done
// with kv before buf changes (the index rebuild, which copies the keys it
// keeps, and skips a copy of every value).
func decodeKV(buf []byte, kv *mvccpb.KeyValue) error {
	kv.Reset()
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 {
			return fmt.Errorf("decode key value: %w", protowire.ParseError(n))
		}
		buf = buf[n:]
		switch {
		case typ == protowire.BytesType && (num == fieldKey || num == fieldValue):
			v, n := protowire.ConsumeBytes(buf)
			if n < 0 {
				return fmt.Errorf("decode key value field %d: %w", num, protowire.ParseError(n))
			}
			v = v[:len(v):len(v)]
			if num == fieldKey {
				kv.Key = v
			} else {
				kv.Value = v
			}
			buf = buf[n:]
		case typ == protowire.VarintType && num >= fieldCreateRevision && num <= fieldLease && num != fieldValue:
			v, n := protowire.ConsumeVarint(buf)
			if n < 0 {
				return fmt.Errorf("decode key value field %d: %w", num, protowire.ParseError(n))
			}
			switch num {
			case fieldCreateRevision:
				kv.CreateRevision = int64(v)
			case fieldModRevision:
				kv.ModRevision = int64(v)
			case fieldVersion:
				kv.Version = int64(v)
			case fieldLease:
				kv.Lease = int64(v)
			}
			buf = buf[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, buf)
			if n < 0 {
				return fmt.Errorf("decode key value field %d: %w", num, protowire.ParseError(n))
			}
			buf = buf[n:]
		}
	}
	return nil
}

// CheckKV reports whether b is a KeyValue the store can open: well-formed
// protobuf (what unmarshalKV accepts) with a key, or empty. It allocates
// nothing; importers of foreign data (pkg/etcddb) call it for every record.
//
// An empty record is etcdutl's revision placeholder: snapshot restore
// --bump-revision writes one at the new revision, and the compaction at that
// revision keeps it for good, as the only revision of the empty key (no
// client can name that key, but HashKV counts it). Every etcd cluster ever
// restored that way carries one, so kvd keeps it as etcd does.
func CheckKV(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	hasKey := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("decode key value: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == fieldKey && typ == protowire.BytesType {
			k, _ := protowire.ConsumeBytes(b)
			hasKey = len(k) > 0
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return fmt.Errorf("decode key value field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	if !hasKey {
		return fmt.Errorf("key value without a key")
	}
	return nil
}
