package pluginhost

import (
	"fmt"
	"io"
	"log"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapHCLog is the hclog.Logger go-plugin logs its messages about the
// process through, under the plugin's name. The plugin's own output is not
// read through it (see stderrLog).
type zapHCLog struct {
	lg *zap.Logger
	// off marks the logger go-plugin would read the plugin's stderr with:
	// at level Off, go-plugin leaves the lines to stderrLog.
	off bool
	// stderrName is the name go-plugin gives that logger: the command's
	// base name.
	stderrName string
	args       []any
}

func newHCLog(lg *zap.Logger, command string) hclog.Logger {
	return &zapHCLog{lg: lg, stderrName: filepath.Base(command)}
}

func (l *zapHCLog) fields(args []any) []zap.Field {
	all := append(append([]any(nil), l.args...), args...)
	fs := make([]zap.Field, 0, len(all)/2+1)
	for i := 0; i < len(all); i += 2 {
		if i+1 == len(all) {
			fs = append(fs, zap.Any("extra", all[i]))
			break
		}
		key := fmt.Sprint(all[i])
		if key == "plugin" {
			// go-plugin's name for the command path; kvd's "plugin"
			// field is the configured name.
			key = "command"
		}
		fs = append(fs, zap.Any(key, all[i+1]))
	}
	return fs
}

func (l *zapHCLog) Log(level hclog.Level, msg string, args ...any) {
	if l.off {
		return
	}
	lvl := zapLevel(level)
	if ce := l.lg.Check(lvl, msg); ce != nil {
		ce.Write(l.fields(args)...)
	}
}

func zapLevel(level hclog.Level) zapcore.Level {
	switch level {
	case hclog.Trace, hclog.Debug:
		return zapcore.DebugLevel
	case hclog.Warn:
		return zapcore.WarnLevel
	case hclog.Error:
		return zapcore.ErrorLevel
	default:
		return zapcore.InfoLevel
	}
}

func (l *zapHCLog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *zapHCLog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *zapHCLog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *zapHCLog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *zapHCLog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *zapHCLog) IsTrace() bool { return l.lg.Core().Enabled(zapcore.DebugLevel) }
func (l *zapHCLog) IsDebug() bool { return l.lg.Core().Enabled(zapcore.DebugLevel) }
func (l *zapHCLog) IsInfo() bool  { return l.lg.Core().Enabled(zapcore.InfoLevel) }
func (l *zapHCLog) IsWarn() bool  { return l.lg.Core().Enabled(zapcore.WarnLevel) }
func (l *zapHCLog) IsError() bool { return l.lg.Core().Enabled(zapcore.ErrorLevel) }

func (l *zapHCLog) ImpliedArgs() []any { return l.args }

func (l *zapHCLog) With(args ...any) hclog.Logger {
	c := *l
	c.args = append(append([]any(nil), l.args...), args...)
	return &c
}

// Name is empty: the plugin's name is already a field of lg.
func (l *zapHCLog) Name() string { return "" }

// Named is how go-plugin makes the logger of the plugin's stderr (named
// after the command) and of its own parts (stdio, ...).
func (l *zapHCLog) Named(name string) hclog.Logger {
	c := *l
	c.off = name == l.stderrName
	return &c
}

func (l *zapHCLog) ResetNamed(name string) hclog.Logger { return l.Named(name) }

func (l *zapHCLog) SetLevel(hclog.Level) {}

// GetLevel lets go-plugin forward every message (zap filters by kvd's
// level), except on the stderr logger, which is Off.
func (l *zapHCLog) GetLevel() hclog.Level {
	if l.off {
		return hclog.Off
	}
	return hclog.Trace
}

func (l *zapHCLog) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(nil), "", 0)
}

func (l *zapHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return lineWriter(func(line string) { l.Info(line) })
}

// lineWriter logs each write, trimmed, as one line.
type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) {
	if s := strings.TrimRight(string(p), "\r\n"); s != "" {
		w(s)
	}
	return len(p), nil
}
