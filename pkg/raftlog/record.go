package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ErrCorrupt is wrapped by every error that reports damaged WAL or snapshot
// data that recovery refuses to repair.
var ErrCorrupt = errors.New("raftlog: corrupt")

// ErrClosed is returned by writes to a closed Log.
var ErrClosed = errors.New("raftlog: closed")

// Record types. The values are part of the on-disk format.
const (
	recSegmentHeader byte = 1
	recEntry         byte = 2
	recHardState     byte = 3
	recSnapshot      byte = 4
)

// recordHeaderSize is len(uint32) + crc32c(uint32) + type(uint8) +
// header crc32c(uint32). The header CRC lets recovery trust the length of a
// record that runs past the end of the file: only then is it a write cut
// short rather than a damaged length.
const recordHeaderSize = 13

// headerCRCOffset is where the header CRC sits; it covers the bytes before.
const headerCRCOffset = 9

const (
	segmentMagic   = "KVDWAL\x00\x00"
	segmentVersion = 1
	// segmentHeaderPayloadSize is magic(8) + version(4) + seq(8) + firstIndex(8).
	segmentHeaderPayloadSize = 28
)

// Snapshot marker kinds. A reset marker comes from a snapshot received
// through Save: the log restarts right after it. A compact marker comes from
// CreateSnapshot: the entries after it stay.
const (
	markerCompact byte = 1
	markerReset   byte = 2
	// markerPayloadSize is kind(1) + index(8) + term(8).
	markerPayloadSize = 17
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// recordCRC covers the type byte and the payload.
func recordCRC(typ byte, payload []byte) uint32 {
	return crc32.Update(typeCRC[typ], crcTable, payload)
}

// typeCRC[t] is the CRC of the type byte t alone, where every record's CRC
// starts: computed once, as a one-byte slice per call would be allocated.
var typeCRC = func() (t [256]uint32) {
	for i := range t {
		t[i] = crc32.Update(0, crcTable, []byte{byte(i)})
	}
	return t
}()

// beginRecord reserves a record header at the end of buf and returns the
// extended buffer and the header's offset; finishRecord fills it in once the
// payload has been appended.
func beginRecord(buf []byte) ([]byte, int) {
	off := len(buf)
	return append(buf, make([]byte, recordHeaderSize)...), off
}

func finishRecord(buf []byte, off int, typ byte) []byte {
	payload := buf[off+recordHeaderSize:]
	binary.LittleEndian.PutUint32(buf[off:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[off+4:], recordCRC(typ, payload))
	buf[off+8] = typ
	binary.LittleEndian.PutUint32(buf[off+headerCRCOffset:], crc32.Checksum(buf[off:off+headerCRCOffset], crcTable))
	return buf
}

var marshalOpts = proto.MarshalOptions{}

func appendProtoRecord(buf []byte, typ byte, m proto.Message) ([]byte, error) {
	buf, off := beginRecord(buf)
	buf, err := marshalOpts.MarshalAppend(buf, m)
	if err != nil {
		return buf[:off], fmt.Errorf("marshal record type %d: %w", typ, err)
	}
	return finishRecord(buf, off, typ), nil
}

func appendEntryRecord(buf []byte, e *raftpb.Entry) ([]byte, error) {
	return appendProtoRecord(buf, recEntry, e)
}

func appendHardStateRecord(buf []byte, hs *raftpb.HardState) ([]byte, error) {
	return appendProtoRecord(buf, recHardState, hs)
}

func appendMarkerRecord(buf []byte, kind byte, index, term uint64) []byte {
	buf, off := beginRecord(buf)
	buf = append(buf, kind)
	buf = binary.LittleEndian.AppendUint64(buf, index)
	buf = binary.LittleEndian.AppendUint64(buf, term)
	return finishRecord(buf, off, recSnapshot)
}

func appendSegmentHeaderRecord(buf []byte, seq, firstIndex uint64) []byte {
	buf, off := beginRecord(buf)
	buf = append(buf, segmentMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, segmentVersion)
	buf = binary.LittleEndian.AppendUint64(buf, seq)
	buf = binary.LittleEndian.AppendUint64(buf, firstIndex)
	return finishRecord(buf, off, recSegmentHeader)
}

type segmentHeader struct {
	seq, firstIndex uint64
}

func decodeSegmentHeader(p []byte) (segmentHeader, error) {
	if len(p) != segmentHeaderPayloadSize {
		return segmentHeader{}, fmt.Errorf("segment header has %d bytes, want %d", len(p), segmentHeaderPayloadSize)
	}
	if string(p[:8]) != segmentMagic {
		return segmentHeader{}, fmt.Errorf("bad segment magic %q", p[:8])
	}
	if v := binary.LittleEndian.Uint32(p[8:]); v != segmentVersion {
		return segmentHeader{}, fmt.Errorf("unsupported segment version %d", v)
	}
	return segmentHeader{
		seq:        binary.LittleEndian.Uint64(p[12:]),
		firstIndex: binary.LittleEndian.Uint64(p[20:]),
	}, nil
}

type marker struct {
	kind        byte
	index, term uint64
}

func decodeMarker(p []byte) (marker, error) {
	if len(p) != markerPayloadSize {
		return marker{}, fmt.Errorf("snapshot marker has %d bytes, want %d", len(p), markerPayloadSize)
	}
	m := marker{
		kind:  p[0],
		index: binary.LittleEndian.Uint64(p[1:]),
		term:  binary.LittleEndian.Uint64(p[9:]),
	}
	if m.kind != markerCompact && m.kind != markerReset {
		return marker{}, fmt.Errorf("unknown snapshot marker kind %d", m.kind)
	}
	return m, nil
}

// scanResult says how a segment scan ended.
type scanResult struct {
	// validEnd is the offset just past the last good record.
	validEnd int64
	// torn is set when the bytes after validEnd are a torn write (only
	// possible when the scan was told the segment is the last one).
	torn bool
	// tornReason says what was wrong at validEnd, for the warning.
	tornReason string
}

// scanRecords walks the records in data, calling fn for each good one. In
// the last segment, zero bytes from a record boundary to the end are
// preallocated space: the scan ends there cleanly (segments before it are
// cut to their records when the next one starts). In
// the last segment an incomplete record (the file ends inside its header, or
// inside the payload of an intact header), or a record with a bad CRC
// followed only by zero bytes, ends the scan as a torn write; anything else
// that is wrong returns an error wrapping ErrCorrupt with the offset. Errors
// from fn are returned as they are.
func scanRecords(data []byte, last bool, fn func(off int64, typ byte, payload []byte) error) (scanResult, error) {
	off := 0
	for off < len(data) {
		rest := len(data) - off
		if last && data[off] == 0 && allZero(data[off:min(len(data), off+recordHeaderSize)]) && allZero(data[off:]) {
			// Preallocated space never written: the clean end. (A record
			// header is never all zeros: its CRC of zeros is not zero.)
			return scanResult{validEnd: int64(off)}, nil
		}
		if rest < recordHeaderSize {
			if last {
				return scanResult{validEnd: int64(off), torn: true, tornReason: "incomplete record header"}, nil
			}
			return scanResult{}, fmt.Errorf("%w: incomplete record header at offset %d", ErrCorrupt, off)
		}
		if crc32.Checksum(data[off:off+headerCRCOffset], crcTable) != binary.LittleEndian.Uint32(data[off+headerCRCOffset:]) {
			if last && allZero(data[off+recordHeaderSize:]) {
				return scanResult{validEnd: int64(off), torn: true, tornReason: "bad record header followed only by zero bytes"}, nil
			}
			return scanResult{}, fmt.Errorf("%w: bad record header crc at offset %d", ErrCorrupt, off)
		}
		n := int(binary.LittleEndian.Uint32(data[off:]))
		crc := binary.LittleEndian.Uint32(data[off+4:])
		typ := data[off+8]
		if n > rest-recordHeaderSize {
			if last {
				return scanResult{validEnd: int64(off), torn: true, tornReason: fmt.Sprintf("incomplete record (length %d, %d bytes left)", n, rest-recordHeaderSize)}, nil
			}
			return scanResult{}, fmt.Errorf("%w: record at offset %d runs past end of segment (length %d)", ErrCorrupt, off, n)
		}
		end := off + recordHeaderSize + n
		payload := data[off+recordHeaderSize : end]
		if recordCRC(typ, payload) != crc {
			if last && allZero(data[end:]) {
				return scanResult{validEnd: int64(off), torn: true, tornReason: "bad crc followed only by zero bytes"}, nil
			}
			return scanResult{}, fmt.Errorf("%w: bad record crc at offset %d", ErrCorrupt, off)
		}
		if err := fn(int64(off), typ, payload); err != nil {
			return scanResult{}, err
		}
		off = end
	}
	return scanResult{validEnd: int64(off)}, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
