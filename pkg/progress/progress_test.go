package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// fakeClock steps a fixed amount on every call.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time { t = t.Add(step); return t }
}

func TestPlainLines(t *testing.T) {
	var out bytes.Buffer
	m := New(&out, "restore", 4<<20)
	m.now = fakeClock(3 * time.Second)
	m.start = time.Unix(0, 0)
	m.last = m.start
	if _, err := io.Copy(io.Discard, m.Reader(bytes.NewReader(make([]byte, 2<<20)))); err != nil {
		t.Fatal(err)
	}
	m.Done()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("want a progress line and a final line, got %q", out.String())
	}
	if strings.Contains(out.String(), "\r") || strings.Contains(out.String(), "[") {
		t.Errorf("plain output must not redraw or draw a bar: %q", out.String())
	}
	last := lines[len(lines)-1]
	if !strings.Contains(last, "restore: 2.0 MiB, ") || !strings.Contains(last, "done in") {
		t.Errorf("final line %q", last)
	}
	if !strings.Contains(lines[0], "left") {
		t.Errorf("a progress line should estimate the time left: %q", lines[0])
	}
	m.Done() // twice is harmless
	if n := strings.Count(out.String(), "done in"); n != 1 {
		t.Errorf("%d final lines, want 1", n)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 29: "1.5 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestNotTerminal(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is not a terminal")
	}
}
