package badger

import (
	"bytes"
	"io"
	"math/rand"
	"testing"
	"testing/iotest"
)

func frame(t *testing.T, body []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	sw, err := newSnapshotWriter(&out)
	if err != nil {
		t.Fatal(err)
	}
	// Several writes, as the stream makes them.
	for rest := body; len(rest) > 0; {
		n := min(len(rest), 1000)
		if _, err := sw.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := sw.finish(); err != nil {
		t.Fatal(err)
	}
	if sw.n != int64(out.Len()) {
		t.Fatalf("writer counted %d bytes, wrote %d", sw.n, out.Len())
	}
	return out.Bytes()
}

// unframe reads the body through r and verifies the trailer.
func unframe(r io.Reader) ([]byte, error) {
	sr, err := newSnapshotReader(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(sr)
	if err != nil {
		return nil, err
	}
	return body, sr.verify()
}

func TestSnapshotFraming(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, size := range []int{0, 1, trailerLen - 1, trailerLen, trailerLen + 1, 4095, 70000} {
		body := make([]byte, size)
		rng.Read(body)
		framed := frame(t, body)
		readers := map[string]func([]byte) io.Reader{
			"whole":    func(b []byte) io.Reader { return bytes.NewReader(b) },
			"one byte": func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
			"half":     func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
			"data+EOF": func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
		}
		for name, mk := range readers {
			got, err := unframe(mk(framed))
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("size %d, %s reader: got %d bytes, %v; want the %d-byte body", size, name, len(got), err, size)
			}
		}
		// Every cut is caught, wherever it falls.
		for cut := 0; cut < len(framed); cut += 1 + cut/8 {
			if _, err := unframe(bytes.NewReader(framed[:cut])); err == nil {
				t.Fatalf("size %d: stream cut at %d of %d accepted", size, cut, len(framed))
			}
		}
		// So is any flipped byte.
		for i := 0; i < 20; i++ {
			bad := bytes.Clone(framed)
			bad[rng.Intn(len(bad))] ^= 1 << rng.Intn(8)
			if _, err := unframe(bytes.NewReader(bad)); err == nil {
				t.Fatalf("size %d: damaged stream accepted", size)
			}
		}
	}
}

// A consumer that stops early still has the rest checked.
func TestSnapshotVerifyReadsToEnd(t *testing.T) {
	framed := frame(t, bytes.Repeat([]byte("x"), 5000))
	sr, err := newSnapshotReader(bytes.NewReader(framed))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(sr, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if err := sr.verify(); err != nil {
		t.Fatalf("verify after a partial read: %v", err)
	}
}
