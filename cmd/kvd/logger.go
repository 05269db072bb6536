package main

import (
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kvd-dev/kvd/pkg/config"
)

// newLogger builds the member's logger from log-level, log-outputs and
// log-format the way etcd's zap logger is built (embed/config_logging.go,
// client/pkg/v3/logutil): etcd's encoder (ts with microseconds, level,
// logger, caller, msg, durations as strings), "json" or "console"
// encoding, and each output ("default" and "stderr" are stderr, "stdout",
// or a file path, appended to) receiving both the log and zap's own
// errors. Unlike etcd, repeated messages are not sampled. Validate has
// checked the values; an output file that cannot be opened is an error
// naming log-outputs.
func newLogger(c *config.Config) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	zc := zap.Config{
		Level:    zap.NewAtomicLevelAt(lvl),
		Encoding: c.LogFormat,
		EncoderConfig: zapcore.EncoderConfig{
			TimeKey:       "ts",
			LevelKey:      "level",
			NameKey:       "logger",
			CallerKey:     "caller",
			MessageKey:    "msg",
			StacktraceKey: "stacktrace",
			LineEnding:    zapcore.DefaultLineEnding,
			EncodeLevel:   zapcore.LowercaseLevelEncoder,
			EncodeTime: func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
				enc.AppendString(t.Format("2006-01-02T15:04:05.000000Z0700"))
			},
			EncodeDuration: zapcore.StringDurationEncoder,
			EncodeCaller:   zapcore.ShortCallerEncoder,
		},
		OutputPaths:      logPaths(c.LogOutputs),
		ErrorOutputPaths: logPaths(c.LogOutputs),
	}
	if zc.Encoding == "" {
		zc.Encoding = "json"
	}
	lg, err := zc.Build()
	if err != nil {
		return nil, fmt.Errorf("log-outputs %q: %w", c.LogOutputs, err)
	}
	return lg, nil
}

// logPaths turns log-outputs into zap sink paths, without duplicates (as
// etcd's logutil.MergeOutputPaths; "/dev/null" among them discards all).
func logPaths(outputs []string) []string {
	var paths []string
	seen := map[string]bool{}
	for _, o := range outputs {
		p := o
		if o == "default" {
			p = "stderr"
		}
		if p == "/dev/null" {
			return []string{"/dev/null"}
		}
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	return paths
}
