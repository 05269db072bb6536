// The example Node.js plugin, run by kvd's real plugin host: handshake,
// health, allow and deny answers, a restart after a crash, and a clean
// stop. It needs node and npm (and the npm registry, or a warm npm cache);
// without them it is skipped.
package nodeallowlist_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvd-dev/kvd/pkg/pluginhost"
)

// installed is the plugin, npm-installed once for all the tests.
var installed struct {
	once   sync.Once
	dir    string
	plugin string // plugin.js, when the install worked
	skip   string // why the tests are skipped
	err    string // why they fail
}

func TestMain(m *testing.M) {
	code := m.Run()
	if installed.dir != "" {
		_ = os.RemoveAll(installed.dir)
	}
	os.Exit(code)
}

// install copies the plugin to a temporary directory and runs npm ci there,
// so the working tree gets no node_modules. It returns plugin.js's path.
func install(t *testing.T) string {
	t.Helper()
	installed.once.Do(doInstall)
	switch {
	case installed.skip != "":
		t.Skip(installed.skip)
	case installed.err != "":
		t.Fatal(installed.err)
	}
	return installed.plugin
}

func doInstall() {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			installed.skip = fmt.Sprintf("%s is not on PATH: %v", tool, err)
			return
		}
	}
	dir, err := os.MkdirTemp("", "node-allowlist")
	if err != nil {
		installed.err = err.Error()
		return
	}
	installed.dir = dir
	for _, f := range []string{"package.json", "package-lock.json", "plugin.js", "health.proto", "controller.proto"} {
		b, err := os.ReadFile(f)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if err != nil {
			installed.err = err.Error()
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	// Offline, npm retries for over a minute by default; a little less.
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false",
		"npm_config_fetch_retry_mintimeout=2000", "npm_config_fetch_retry_maxtimeout=10000")
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil:
		installed.plugin = filepath.Join(dir, "plugin.js")
	case ctx.Err() != nil || networkTrouble.Match(out):
		installed.skip = fmt.Sprintf("npm ci could not fetch the packages (no registry?): %v\n%s", err, out)
	default:
		installed.err = fmt.Sprintf("npm ci: %v\n%s", err, out)
	}
}

// networkTrouble is npm's output when the registry is out of reach; any
// other npm ci failure (a lock file out of step with package.json, say)
// fails the test.
var networkTrouble = regexp.MustCompile(`E(NOTFOUND|AI_AGAIN|CONNREFUSED|CONNRESET|TIMEDOUT|NETUNREACH|HOSTUNREACH|PROXY)|ETIMEDOUT|network|fetch failed|socket hang up|code E5\d\d`)

func protoPath(t *testing.T) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "proto", "authplugin", "v1", "authplugin.proto"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func spec(name, plugin, proto, allow string) pluginhost.Spec {
	return pluginhost.Spec{
		Name: name, Kind: "authorizer", Command: "node", Args: []string{plugin},
		Env:     map[string]string{"KVD_ALLOWLIST": allow, "KVD_AUTHPLUGIN_PROTO": proto},
		Timeout: 5 * time.Second, OnFailure: pluginhost.OnFailureDeny,
	}
}

// logger logs to the test and keeps the entries for inspection.
func logger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core())), logs
}

func TestNodeAllowlist(t *testing.T) {
	plugin := install(t)
	lg, logs := logger(t)
	reg := prometheus.NewRegistry()
	h, err := pluginhost.Start([]pluginhost.Spec{spec("allowlist", plugin, protoPath(t), "/app/,/public/")},
		pluginhost.Options{Logger: lg, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			h.Close()
		}
	}()

	st := h.Status()
	if len(st) != 1 || st[0].Name != "allowlist" || st[0].Kind != "authorizer" || st[0].ProtocolVersion != 1 || st[0].PID <= 0 || st[0].Err != nil {
		t.Fatalf("status: %+v", st)
	}
	// The plugin's own log line reaches the host's log under its name.
	if n := logs.FilterMessage("serving").FilterField(zap.String("plugin", "allowlist")).Len(); n != 1 {
		t.Fatalf("plugin's \"serving\" log lines in kvd's log: %d, want 1", n)
	}

	ctx := context.Background()
	alice := pluginhost.Caller{User: "alice", Roles: []string{"dev"}, Authenticator: "htpasswd"}
	access := func(write bool, key, end string) pluginhost.Access {
		a := pluginhost.Access{Write: write, Key: []byte(key)}
		if end != "" {
			a.RangeEnd = []byte(end)
		}
		return a
	}
	for _, tc := range []struct {
		name     string
		who      pluginhost.Caller
		accesses []pluginhost.Access
		allow    bool
	}{
		{"key under a prefix", alice, []pluginhost.Access{access(true, "/app/x", "")}, true},
		{"prefix range", alice, []pluginhost.Access{access(false, "/public/", "/public0")}, true},
		{"range inside", alice, []pluginhost.Access{access(false, "/app/a", "/app/b")}, true},
		{"binary key", alice, []pluginhost.Access{access(true, "/app/\xff\x00\x80", "")}, true},
		{"several, all inside", alice, []pluginhost.Access{access(false, "/app/x", ""), access(true, "/public/y", "")}, true},
		{"key outside", alice, []pluginhost.Access{access(false, "/secret/x", "")}, false},
		{"the prefix without its slash", alice, []pluginhost.Access{access(true, "/app", "")}, false},
		{"range past the prefix", alice, []pluginhost.Access{access(false, "/app/a", "/b")}, false},
		{"range to the end", alice, []pluginhost.Access{access(false, "/app/", "\x00")}, false},
		{"one of several outside", alice, []pluginhost.Access{access(false, "/app/x", ""), access(true, "/etc/y", "")}, false},
		{"root is exempt", pluginhost.Caller{User: "root", Roles: []string{"root"}}, []pluginhost.Access{access(true, "/secret/x", "")}, true},
	} {
		err := h.Authorize(ctx, tc.who, "/etcdserverpb.KV/Txn", tc.accesses, 1)
		switch {
		case tc.allow && err != nil:
			t.Errorf("%s: %v, want allowed", tc.name, err)
		case !tc.allow && !errors.Is(err, rpctypes.ErrGRPCPermissionDenied):
			t.Errorf("%s: %v, want %v", tc.name, err, rpctypes.ErrGRPCPermissionDenied)
		}
	}
	allows, denies := calls(t, reg, "allow"), calls(t, reg, "deny")
	if allows != 6 || denies != 5 || calls(t, reg, "failure") != 0 {
		t.Fatalf("calls: %v allow, %v deny, %v failure; want 6, 5, 0", allows, denies, calls(t, reg, "failure"))
	}
	if n := logs.FilterMessage("auth plugin denied a request").FilterField(zap.String("user-name", "alice")).Len(); n != 5 {
		t.Fatalf("deny log lines: %d, want 5", n)
	}

	// A crash: the host restarts the plugin, which answers again.
	if err := syscall.Kill(st[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st2 := h.Status()
		if st2[0].Err == nil && st2[0].PID != st[0].PID {
			if err := h.Authorize(ctx, alice, "/etcdserverpb.KV/Put", []pluginhost.Access{access(true, "/app/x", "")}, 2); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin not back after a crash: %+v", st2)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Stopping: the plugin exits on go-plugin's Shutdown call, so the host
	// need not kill it.
	h.Close()
	closed = true
	if n := logs.FilterMessageSnippet("failed to exit gracefully").Len(); n != 0 {
		t.Fatalf("the host had to kill the plugin %d times", n)
	}
}

// A plugin that exits before its handshake stops the host's start with an
// error naming it; what it wrote to stderr is in kvd's log.
func TestNodeAllowlistRefusesToStart(t *testing.T) {
	plugin := install(t)
	lg, logs := logger(t)
	h, err := pluginhost.Start([]pluginhost.Spec{spec("empty", plugin, protoPath(t), "")}, pluginhost.Options{Logger: lg})
	if err == nil {
		h.Close()
		t.Fatal("started without KVD_ALLOWLIST")
	}
	if !strings.Contains(err.Error(), `auth plugin "empty": handshake`) {
		t.Fatalf("error: %v", err)
	}
	if logs.FilterMessageSnippet("KVD_ALLOWLIST is empty").FilterField(zap.String("plugin", "empty")).Len() != 1 {
		t.Fatalf("the plugin's complaint is not in the log: %v", logs.All())
	}
}

// calls is kvd_auth_plugin_calls_total of the plugin "allowlist" with the
// given result.
func calls(t *testing.T, reg *prometheus.Registry, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kvd_auth_plugin_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["plugin"] == "allowlist" && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
