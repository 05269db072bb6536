package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
)

func logConfig(level, format string, outputs ...string) *config.Config {
	c := config.Default()
	c.LogLevel, c.LogFormat, c.LogOutputs = level, format, outputs
	return c
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// log-outputs with several files writes each line to each; log-format json
// is etcd's encoding; log-level drops what is below it.
func TestLoggerJSONToFiles(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	lg, err := newLogger(logConfig("warn", "json", a, b, a))
	if err != nil {
		t.Fatal(err)
	}
	lg.Named("apply").Info("dropped")
	lg.Named("apply").Warn("apply request took too long", zap.Duration("took", 1500*time.Millisecond))
	_ = lg.Sync()
	for _, p := range []string{a, b} {
		lines := readLines(t, p)
		if len(lines) != 1 {
			t.Fatalf("%s: %d lines, want 1 (the warning, once): %q", p, len(lines), lines)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
			t.Fatalf("%s: %v: %s", p, err, lines[0])
		}
		if m["level"] != "warn" || m["logger"] != "apply" || m["msg"] != "apply request took too long" || m["took"] != "1.5s" {
			t.Errorf("%s: %s", p, lines[0])
		}
		if c, _ := m["caller"].(string); !strings.HasPrefix(c, "kvd/logger_test.go:") {
			t.Errorf("%s: caller %q, want the short form", p, c)
		}
		// etcd's timestamp: microseconds and a numeric zone.
		if ts, _ := m["ts"].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d{4})$`).MatchString(ts) {
			t.Errorf("%s: ts %q", p, ts)
		}
	}
}

// log-format console writes tab-separated lines, as etcd's.
func TestLoggerConsole(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kvd.log")
	lg, err := newLogger(logConfig("debug", "console", p))
	if err != nil {
		t.Fatal(err)
	}
	lg.Debug("hello", zap.String("k", "v"))
	_ = lg.Sync()
	f := strings.Split(readLines(t, p)[0], "\t")
	if len(f) != 5 || f[1] != "debug" || f[3] != "hello" || f[4] != `{"k": "v"}` {
		t.Fatalf("console line fields %q", f)
	}
}

// log-outputs stdout and default (stderr) write there.
func TestLoggerStdStreams(t *testing.T) {
	for _, tc := range []struct {
		output string
		stream **os.File
	}{{"stdout", &os.Stdout}, {"default", &os.Stderr}, {"stderr", &os.Stderr}} {
		t.Run(tc.output, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			saved := *tc.stream
			*tc.stream = w
			lg, err := newLogger(logConfig("info", "json", tc.output))
			*tc.stream = saved
			if err != nil {
				t.Fatal(err)
			}
			lg.Info("to " + tc.output)
			w.Close()
			b, _ := io.ReadAll(r)
			if !strings.Contains(string(b), `"msg":"to `+tc.output+`"`) {
				t.Fatalf("%s got %q", tc.output, b)
			}
		})
	}
}

// A log output file that cannot be opened stops the start, naming the key.
func TestLoggerBadOutput(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "kvd.log")
	_, err := newLogger(logConfig("info", "json", p))
	if err == nil || !strings.Contains(err.Error(), "log-outputs") || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want one naming log-outputs and %s", err, p)
	}
}
