package harness

import "slices"

// AddArgs appends flags to the member's command line for its next starts
// (Start, Restart); it must not be running concurrently with them.
func (p *Process) AddArgs(args ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.args = append(slices.Clone(p.args), args...)
}

// LogContains reports whether any run's stdout or stderr holds s.
func (p *Process) LogContains(s string) bool { return p.logContains(s) }

// LastRunLogContains reports whether the latest run's stdout or stderr holds
// s: what this start logged, not an earlier one.
func (p *Process) LastRunLogContains(s string) bool {
	p.mu.Lock()
	var last []string
	if n := len(p.logs); n >= 2 { // each run adds its stdout and stderr (launch)
		last = slices.Clone(p.logs[n-2:])
	}
	p.mu.Unlock()
	return filesContain(last, s)
}
