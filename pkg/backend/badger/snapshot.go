package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// A snapshot is framed so that Restore can tell a whole stream from one cut
// short (Badger's backup format ends at any record boundary):
//
//	snapHeader | Badger backup stream | snapTrailer | len(stream) u64 | crc32c(stream) u32
//
// integers little-endian.
const (
	snapHeader  = "kvdbdg1\n"
	snapTrailer = "kvdbdg1$"
	trailerLen  = len(snapTrailer) + 8 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshotWriter frames a backup stream written through it.
type snapshotWriter struct {
	w   io.Writer
	n   int64 // bytes written to w, framing included
	len int64 // stream bytes
	crc hash.Hash32
}

func newSnapshotWriter(w io.Writer) (*snapshotWriter, error) {
	s := &snapshotWriter{w: w, crc: crc32.New(castagnoli)}
	if _, err := s.raw([]byte(snapHeader)); err != nil {
		return s, err
	}
	return s, nil
}

func (s *snapshotWriter) raw(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.n += int64(n)
	return n, err
}

func (s *snapshotWriter) Write(p []byte) (int, error) {
	n, err := s.raw(p)
	s.len += int64(n)
	_, _ = s.crc.Write(p[:n])
	return n, err
}

func (s *snapshotWriter) finish() error {
	t := make([]byte, 0, trailerLen)
	t = append(t, snapTrailer...)
	t = binary.LittleEndian.AppendUint64(t, uint64(s.len))
	t = binary.LittleEndian.AppendUint32(t, s.crc.Sum32())
	_, err := s.raw(t)
	return err
}

// snapshotReader unframes a snapshot: it hands out the backup stream and
// holds back the last trailerLen bytes, which verify checks.
type snapshotReader struct {
	r   io.Reader
	buf []byte // read from r, not yet handed out; the tail may be the trailer
	eof bool
	len int64
	crc hash.Hash32
}

func newSnapshotReader(r io.Reader) (*snapshotReader, error) {
	hdr := make([]byte, len(snapHeader))
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("read snapshot header: %w", err)
	}
	if string(hdr) != snapHeader {
		return nil, errors.New("not a kvd badger snapshot (bad header)")
	}
	return &snapshotReader{r: r, crc: crc32.New(castagnoli)}, nil
}

func (s *snapshotReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for !s.eof && len(s.buf) <= trailerLen+len(p) {
		if cap(s.buf)-len(s.buf) < len(p) {
			nb := make([]byte, len(s.buf), len(s.buf)+trailerLen+2*len(p))
			copy(nb, s.buf)
			s.buf = nb
		}
		n, err := s.r.Read(s.buf[len(s.buf):cap(s.buf)])
		s.buf = s.buf[:len(s.buf)+n]
		if errors.Is(err, io.EOF) {
			s.eof = true
		} else if err != nil {
			return 0, err
		}
		if n > 0 {
			break
		}
	}
	avail := len(s.buf) - trailerLen
	if avail <= 0 {
		if s.eof {
			return 0, io.EOF
		}
		return 0, nil
	}
	n := copy(p, s.buf[:avail])
	_, _ = s.crc.Write(p[:n])
	s.len += int64(n)
	s.buf = s.buf[:copy(s.buf, s.buf[n:])]
	return n, nil
}

// verify checks the trailer once the stream has been read to its end.
func (s *snapshotReader) verify() error {
	// Whatever the consumer left unread is counted, so a short read shows.
	if _, err := io.Copy(io.Discard, s); err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	t := s.buf
	if len(t) != trailerLen || !bytes.Equal(t[:len(snapTrailer)], []byte(snapTrailer)) {
		return errors.New("snapshot truncated (no trailer)")
	}
	wantLen := binary.LittleEndian.Uint64(t[len(snapTrailer):])
	wantCRC := binary.LittleEndian.Uint32(t[len(snapTrailer)+8:])
	if wantLen != uint64(s.len) || wantCRC != s.crc.Sum32() {
		return fmt.Errorf("snapshot damaged: %d bytes crc %08x, trailer says %d bytes crc %08x",
			s.len, s.crc.Sum32(), wantLen, wantCRC)
	}
	return nil
}
