package raftnode

import (
	"strings"

	"go.uber.org/zap"
)

// raftLogger adapts zap to raft.Logger. Raft's Info is chatty per election, so
// it maps to Info; Debug stays Debug.
type raftLogger struct{ s *zap.SugaredLogger }

func (l raftLogger) Debug(v ...any)                 { l.s.Debug(v...) }
func (l raftLogger) Debugf(format string, v ...any) { l.s.Debugf(format, v...) }
func (l raftLogger) Error(v ...any)                 { l.s.Error(v...) }
func (l raftLogger) Errorf(format string, v ...any) { l.s.Errorf(format, v...) }
func (l raftLogger) Info(v ...any)                  { l.s.Info(v...) }
func (l raftLogger) Infof(format string, v ...any) {
	// With asynchronous storage writes, an append acknowledged after a
	// later one already made its entries stable is normal, and frequent
	// under load: not worth an info line each time.
	if strings.HasPrefix(format, "entry at index %d missing from unstable log") {
		l.s.Debugf(format, v...)
		return
	}
	l.s.Infof(format, v...)
}
func (l raftLogger) Warning(v ...any) { l.s.Warn(v...) }
func (l raftLogger) Warningf(format string, v ...any) {
	l.s.Warnf(format, v...)
}
func (l raftLogger) Fatal(v ...any)                 { l.s.Fatal(v...) }
func (l raftLogger) Fatalf(format string, v ...any) { l.s.Fatalf(format, v...) }
func (l raftLogger) Panic(v ...any)                 { l.s.Panic(v...) }
func (l raftLogger) Panicf(format string, v ...any) { l.s.Panicf(format, v...) }
