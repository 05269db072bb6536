package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// kvdExitTimeout bounds how long kvd may take to refuse a plugin and exit.
const kvdExitTimeout = 30 * time.Second

// brokenPlugins are plugins kvd must refuse to start with, by name.
func brokenPlugins(t *testing.T) []harness.PluginSpec {
	bin := harness.PluginBinary(t, "testplugin")
	notExec := filepath.Join(t.TempDir(), "not-executable")
	mustOK(t, "write not-executable", os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644))
	return []harness.PluginSpec{
		{Name: "proto-v2", Kind: "authenticator", Command: bin, Args: []string{"--kind", "authenticator", "--protocol-version", "2"}},
		{Name: "missing", Kind: "authenticator", Command: filepath.Join(t.TempDir(), "no-such-plugin")},
		{Name: "not-executable", Kind: "authorizer", Command: notExec},
		// An authorizer configured as an authenticator serves the wrong
		// service.
		{Name: "wrong-kind", Kind: "authenticator", Command: bin, Args: []string{"--kind", "authorizer"}},
		// A plugin binary that is no plugin: exits without a handshake.
		{Name: "no-handshake", Kind: "authorizer", Command: "/bin/true"},
	}
}

// TestPluginsStartRefused: kvd does not start with a plugin that speaks
// another protocol version, is missing, is not executable, serves the
// other kind or never answers the handshake: it exits non-zero and says
// which plugin on stderr, and leaves no plugin process behind.
func TestPluginsStartRefused(t *testing.T) {
	plSkipUnlessKVD(t)
	for _, bad := range brokenPlugins(t) {
		t.Run(bad.Name, func(t *testing.T) {
			// marker tells this run's healthy plugin process apart.
			marker := filepath.Join(t.TempDir(), "good-calls")
			good := harness.PluginSpec{
				Name: "good", Kind: "authorizer", Command: harness.PluginBinary(t, "testplugin"),
				Args: []string{"--kind", "authorizer", "--count-file", marker},
			}
			// A healthy plugin first: it must be stopped when the next fails.
			cfg := harness.WritePluginConfig(t, good, bad)
			start := time.Now()
			r := harness.StartKVDExpectExit(t, harness.Options{Engine: "bolt", Args: plArgs(cfg)}, kvdExitTimeout)
			if r.Exit <= 0 {
				t.Fatalf("kvd with plugin %s: %s\nwant a non-zero exit", bad.Name, r)
			}
			if want := `auth plugin "` + bad.Name + `"`; !strings.Contains(r.Stderr, want) {
				t.Errorf("kvd with plugin %s: stderr does not name it (%q):\n%s", bad.Name, want, r.Stderr)
			}
			t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), firstLineWith(r.Stderr, `auth plugin "`))
			if left := processesRunning(t, harness.PluginBinary(t, "testplugin"), marker); len(left) > 0 {
				t.Errorf("plugin processes left behind: %v", left)
			}
		})
	}
}

// TestPluginsCheck: `kvd plugins check --config FILE` starts each plugin,
// prints NAME KIND PROTOCOL PID HEALTH with "ok" rows and exits 0 when all
// are healthy; with a plugin that cannot start it exits 1 naming it.
func TestPluginsCheck(t *testing.T) {
	plSkipUnlessKVD(t)
	dir := t.TempDir()
	users := filepath.Join(dir, "htpasswd")
	plWriteFile(t, users, plHtpasswdLine(t, "alice", "pw"))
	specs := []harness.PluginSpec{
		{Name: "corp-htpasswd", Kind: "authenticator", Command: harness.PluginBinary(t, "htpasswd"), Args: []string{"--file", users}},
		{Name: "tenants", Kind: "authorizer", Command: harness.PluginBinary(t, "prefix")},
		{Name: "testauthz", Kind: "authorizer", Command: harness.PluginBinary(t, "testplugin"), Args: []string{"--kind", "authorizer"}},
	}
	cfg := harness.WritePluginConfig(t, specs...)
	r := harness.RunKVD(t, kvdExitTimeout, "plugins", "check", "--config", cfg)
	if r.Exit != 0 {
		t.Fatalf("kvd plugins check: %s\nwant exit 0", r)
	}
	t.Logf("kvd plugins check:\n%s", r.Stdout)
	lines := nonEmptyLines(r.Stdout)
	if len(lines) != 1+len(specs) || !slicesEqualFields(lines[0], "NAME", "KIND", "PROTOCOL", "PID", "HEALTH") {
		t.Fatalf("kvd plugins check output:\n%s\nwant a NAME KIND PROTOCOL PID HEALTH header and %d rows", r.Stdout, len(specs))
	}
	for _, s := range specs {
		row := lineStartingWith(lines[1:], s.Name)
		f := strings.Fields(row)
		if len(f) != 5 || f[1] != s.Kind || f[2] != "1" || f[4] != "ok" {
			t.Errorf("row of %s: %q, want %s %s 1 <pid> ok", s.Name, row, s.Name, s.Kind)
			continue
		}
		if pid, err := strconv.Atoi(f[3]); err != nil || pid <= 0 {
			t.Errorf("row of %s: PID %q", s.Name, f[3])
		}
	}

	for _, bad := range brokenPlugins(t)[:2] {
		cfg := harness.WritePluginConfig(t, specs[0], bad)
		r := harness.RunKVD(t, kvdExitTimeout, "plugins", "check", "--config", cfg)
		if r.Exit != 1 || !strings.Contains(r.Stderr, `auth plugin "`+bad.Name+`": `) {
			t.Errorf("kvd plugins check with %s: %s\nwant exit 1 and %q on stderr", bad.Name, r, `auth plugin "`+bad.Name+`": `)
		}
	}
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func slicesEqualFields(line string, want ...string) bool {
	f := strings.Fields(line)
	if len(f) != len(want) {
		return false
	}
	for i := range f {
		if f[i] != want[i] {
			return false
		}
	}
	return true
}

func lineStartingWith(lines []string, first string) string {
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return l
		}
	}
	return ""
}

func firstLineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// processesRunning lists the pids of live processes running bin whose
// command line holds arg (a path unique to the test), from /proc.
func processesRunning(t *testing.T, bin, arg string) []int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && args[0] == bin && strings.Contains(string(cmdline), arg) {
			out = append(out, pid)
		}
	}
	return out
}
