package pluginhost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// maxStderrLine bounds one buffered line of a plugin's stderr; the rest of
// a longer line is cut.
const maxStderrLine = 64 << 10

// lastLines is how many of a plugin's last output lines a failed start
// quotes.
const lastLines = 3

// stderrLog reads a plugin's stderr in place of go-plugin's reader (which
// panics on a JSON line whose "@message" is not a string): each hclog JSON
// line is logged at its level with its fields, any other line at info.
// It keeps the last few lines, so a plugin that dies at start can say why
// in kvd's error.
type stderrLog struct {
	lg *zap.Logger

	mu   sync.Mutex
	buf  []byte
	last []string
}

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.buf = append(s.buf, p[:min(len(p), maxStderrLine-len(s.buf))]...)
			break
		}
		s.buf = append(s.buf, p[:min(i, maxStderrLine-len(s.buf))]...)
		s.line(strings.TrimRight(string(s.buf), "\r"))
		s.buf = s.buf[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (s *stderrLog) line(line string) {
	if strings.TrimSpace(line) == "" {
		return
	}
	msg, lvl, fields := parseLogLine(line)
	s.last = append(s.last, msg)
	if len(s.last) > lastLines {
		s.last = s.last[1:]
	}
	if ce := s.lg.Check(lvl, msg); ce != nil {
		ce.Write(fields...)
	}
}

// tail is the plugin's last lines of output, for an error.
func (s *stderrLog) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.last, " / ")
}

// parseLogLine reads an hclog JSON line ({"@level","@message",...}); any
// other line is its own message at info. Fields named like kvd's own
// (plugin, kind) get a "plugin." prefix.
func parseLogLine(line string) (string, zapcore.Level, []zap.Field) {
	var raw map[string]any
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &raw) != nil {
		return line, zapcore.InfoLevel, nil
	}
	msg := fmt.Sprint(raw["@message"])
	if _, ok := raw["@message"]; !ok {
		msg = line
	}
	lvl := zapcore.InfoLevel
	switch fmt.Sprint(raw["@level"]) {
	case "trace", "debug":
		lvl = zapcore.DebugLevel
	case "warn":
		lvl = zapcore.WarnLevel
	case "error":
		lvl = zapcore.ErrorLevel
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	fields := make([]zap.Field, 0, len(keys))
	for _, k := range keys {
		name := k
		if k == "plugin" || k == "kind" {
			name = "plugin." + k
		}
		fields = append(fields, zap.Any(name, raw[k]))
	}
	return msg, lvl, fields
}
