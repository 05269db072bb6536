//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

type point struct {
	action string
	at     int64 // act on this hit
	hits   atomic.Int64
}

var points = map[string]*point{}

func init() {
	spec := os.Getenv(Env)
	if spec == "" {
		return
	}
	ps, err := parse(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvd: %s: %v\n", Env, err)
		os.Exit(2)
	}
	points = ps
}

// parse reads "name=action[@N],...".
func parse(spec string) (map[string]*point, error) {
	known := map[string]bool{}
	for _, n := range All {
		known[n] = true
	}
	ps := map[string]*point{}
	for _, e := range strings.Split(spec, ",") {
		name, act, ok := strings.Cut(strings.TrimSpace(e), "=")
		if !ok || !known[name] {
			return nil, fmt.Errorf("%q: want NAME=ACTION[@N] with NAME one of %s", e, strings.Join(All, ", "))
		}
		p := &point{action: act, at: 1}
		if a, n, ok := strings.Cut(act, "@"); ok {
			at, err := strconv.ParseInt(n, 10, 64)
			if err != nil || at < 1 {
				return nil, fmt.Errorf("%q: @N wants a positive count", e)
			}
			p.action, p.at = a, at
		}
		if p.action != "kill" && p.action != "panic" {
			return nil, fmt.Errorf("%q: action %q: want kill or panic", e, p.action)
		}
		ps[name] = p
	}
	return ps, nil
}

// WALSegmentBytes is KVD_FAILPOINT_WAL_SEGMENT_BYTES, or 0: small segments
// let a short crash test reach WAL truncation.
func WALSegmentBytes() int64 {
	n, _ := strconv.ParseInt(os.Getenv(SegmentEnv), 10, 64)
	return max(n, 0)
}

// Hit acts if name is armed and this is the hit it waits for.
func Hit(name string) {
	p := points[name]
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	_, _ = os.Stderr.WriteString("kvd failpoint " + name + " hit\n")
	switch p.action {
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	case "panic":
		panic("kvd failpoint " + name)
	}
}
