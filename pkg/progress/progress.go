// Package progress reports how far a long operation (snapshot restore,
// engine migration) has got: bytes done, rate and time left. On a terminal
// it redraws one line as a bar; anywhere else (a log file, a pipe, a test)
// it prints a plain line every few seconds, so the output stays readable.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Meter counts the bytes of one operation and reports them on its writer.
// Add and Reader may be used from one goroutine at a time; Done ends it.
type Meter struct {
	w     io.Writer
	what  string
	total int64
	tty   bool
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	done   int64
	start  time.Time
	last   time.Time
	closed bool
}

// New starts a meter for an operation named what, of total bytes (0 or less
// when unknown). On a terminal it redraws every 200 ms, elsewhere it prints
// a line every 5 s.
func New(w io.Writer, what string, total int64) *Meter {
	m := &Meter{w: w, what: what, total: total, tty: isTerminal(w), every: 5 * time.Second, now: time.Now}
	if m.tty {
		m.every = 200 * time.Millisecond
	}
	m.start = m.now()
	m.last = m.start
	return m
}

// Discard is a meter that reports nothing.
func Discard() *Meter { return New(io.Discard, "", 0) }

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlReadTermios)
	return err == nil
}

// Add counts n more bytes done and reports if it is time to.
func (m *Meter) Add(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.done += n
	if now := m.now(); !m.closed && now.Sub(m.last) >= m.every {
		m.last = now
		m.report(now, false)
	}
}

// Done prints the final line: bytes done, time taken and average rate.
func (m *Meter) Done() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.closed = true
	// Done, the total is what was done: estimates made up front (a file's
	// size for the records in it) need not come out exact.
	m.total = m.done
	m.report(m.now(), true)
}

// Reader counts the bytes read through r.
func (m *Meter) Reader(r io.Reader) io.Reader { return &countingReader{r: r, m: m} }

// Writer counts the bytes written through w.
func (m *Meter) Writer(w io.Writer) io.Writer { return &countingWriter{w: w, m: m} }

func (m *Meter) report(now time.Time, final bool) {
	if m.w == io.Discard {
		return
	}
	elapsed := now.Sub(m.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(m.done) / s
	}
	var b strings.Builder
	if m.tty {
		b.WriteString("\r\x1b[K")
	}
	fmt.Fprintf(&b, "%s: ", m.what)
	if m.total > 0 && m.tty {
		const width = 30
		filled := int(min(m.done, m.total) * width / m.total)
		b.WriteString("[" + strings.Repeat("=", filled) + strings.Repeat(" ", width-filled) + "] ")
	}
	b.WriteString(Bytes(m.done))
	if m.total > 0 && !final {
		fmt.Fprintf(&b, " of %s (%d%%)", Bytes(m.total), min(m.done, m.total)*100/m.total)
	}
	fmt.Fprintf(&b, ", %s/s", Bytes(int64(rate)))
	switch {
	case final:
		fmt.Fprintf(&b, ", done in %s", elapsed.Round(10*time.Millisecond))
	case m.total > 0 && rate > 0 && m.done < m.total:
		left := time.Duration(float64(m.total-m.done) / rate * float64(time.Second))
		fmt.Fprintf(&b, ", %s left", left.Round(time.Second))
	}
	if final || !m.tty {
		b.WriteString("\n")
	}
	_, _ = io.WriteString(m.w, b.String())
}

// Bytes formats n with a binary unit, as 1.5 GiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

type countingReader struct {
	r io.Reader
	m *Meter
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.m.Add(int64(n))
	return n, err
}

type countingWriter struct {
	w io.Writer
	m *Meter
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.m.Add(int64(n))
	return n, err
}
