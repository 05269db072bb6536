package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvd-dev/kvd/pkg/pluginsdk/plugintest"
)

var testPlugin string

func TestMain(m *testing.M) { plugintest.Main(m, "./internal/testplugin", &testPlugin) }

func spec(name, kind string, args ...string) Spec {
	return Spec{Name: name, Kind: kind, Command: testPlugin, Args: append([]string{"--kind", kind}, args...),
		Timeout: 2 * time.Second, OnFailure: OnFailureDeny, CacheTTL: time.Minute}
}

func start(t *testing.T, specs ...Spec) (*Host, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h, err := Start(specs, Options{Logger: zaptest.NewLogger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, reg
}

func calls(h *Host, name, kind, result string) float64 {
	return testutil.ToFloat64(h.m.calls.WithLabelValues(name, kind, result))
}

func TestPasswordDecisions(t *testing.T) {
	h, _ := start(t,
		spec("first", "authenticator", "--users", "alice:pw:dev+ops"),
		spec("second", "authenticator", "--users", "bob:pw2:"))
	ctx := context.Background()

	id, ok, err := h.Password(ctx, "alice", "pw")
	if err != nil || !ok || id.User != "alice" || strings.Join(id.Groups, ",") != "dev,ops" || id.Plugin != "first" {
		t.Fatalf("alice: %+v %v %v", id, ok, err)
	}
	// The first plugin abstains on bob; the second accepts him.
	id, ok, err = h.Password(ctx, "bob", "pw2")
	if err != nil || !ok || id.Plugin != "second" {
		t.Fatalf("bob: %+v %v %v", id, ok, err)
	}
	// A rejection stops the search: etcd's "authentication failed".
	if _, _, err = h.Password(ctx, "alice", "nope"); !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
		t.Fatalf("wrong password: %v", err)
	}
	// Nobody's user: not ok, no error (kvd's own users decide).
	if _, ok, err = h.Password(ctx, "carol", "x"); ok || err != nil {
		t.Fatalf("unknown user: %v %v", ok, err)
	}
}

func TestTokenCache(t *testing.T) {
	h, _ := start(t, spec("sso", "authenticator", "--users", "alice:pw:dev"))
	ctx := context.Background()
	for range 5 {
		id, ok, err := h.Token(ctx, "tok-alice")
		if err != nil || !ok || id.User != "alice" {
			t.Fatalf("token: %+v %v %v", id, ok, err)
		}
	}
	if n := calls(h, "sso", "authenticator", "accept"); n != 1 {
		t.Fatalf("plugin asked %v times for one token, want 1 (cached)", n)
	}
	if _, ok, err := h.Token(ctx, "someone-elses"); ok || err != nil {
		t.Fatalf("foreign token: %v %v", ok, err)
	}
}

func TestAuthorizeDenyAndCache(t *testing.T) {
	h, _ := start(t, spec("fence", "authorizer", "--deny", "/secret/"))
	ctx := context.Background()
	who := Caller{User: "alice", Roles: []string{"dev"}}
	ok := []Access{{Key: []byte("/app/x")}, {Write: true, Key: []byte("/app/"), RangeEnd: []byte("/app0")}}
	for range 3 {
		if err := h.Authorize(ctx, who, "/etcdserverpb.KV/Txn", ok, 7); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls(h, "fence", "authorizer", "allow"); n != 1 {
		t.Fatalf("allow calls = %v, want 1 (cached)", n)
	}
	// A new auth revision drops the cache.
	if err := h.Authorize(ctx, who, "/etcdserverpb.KV/Txn", ok, 8); err != nil {
		t.Fatal(err)
	}
	if n := calls(h, "fence", "authorizer", "allow"); n != 2 {
		t.Fatalf("allow calls after revision change = %v, want 2", n)
	}
	err := h.Authorize(ctx, who, "/etcdserverpb.KV/Range", []Access{{Key: []byte("/secret/k")}}, 8)
	if !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("deny: %v", err)
	}
	// Denials are never cached.
	_ = h.Authorize(ctx, who, "/etcdserverpb.KV/Range", []Access{{Key: []byte("/secret/k")}}, 8)
	if n := calls(h, "fence", "authorizer", "deny"); n != 2 {
		t.Fatalf("deny calls = %v, want 2", n)
	}
}

func TestGarbageIsDenied(t *testing.T) {
	h, _ := start(t,
		spec("junk-authn", "authenticator", "--garbage"),
		spec("junk-authz", "authorizer", "--garbage"))
	ctx := context.Background()
	if _, _, err := h.Password(ctx, "alice", "pw"); !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
		t.Fatalf("unspecified decision: %v", err)
	}
	if _, _, err := h.Token(ctx, "t"); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
		t.Fatalf("unspecified decision on a token: %v", err)
	}
	if err := h.Authorize(ctx, Caller{User: "a"}, "m", []Access{{Key: []byte("k")}}, 1); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("unspecified verdict: %v", err)
	}
	h2, _ := start(t, spec("empty", "authenticator", "--empty-identity"))
	if _, ok, err := h2.Password(ctx, "alice", "pw"); ok || !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
		t.Fatalf("empty identity: %v %v", ok, err)
	}
}

func TestHangTimesOut(t *testing.T) {
	hang := filepath.Join(t.TempDir(), "hang")
	s := spec("slow", "authorizer", "--hang-file", hang)
	s.Timeout = 150 * time.Millisecond
	skip := spec("slow-skip", "authenticator", "--hang-file", hang, "--users", "alice:pw:")
	skip.Timeout, skip.OnFailure = 150*time.Millisecond, OnFailureSkip
	h, _ := start(t, s, skip)
	if err := os.WriteFile(hang, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now()
	err := h.Authorize(ctx, Caller{User: "a"}, "m", []Access{{Key: []byte("k")}}, 1)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `auth plugin "slow"`) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("hang under deny: %v", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("a hanging plugin held the call %v", d)
	}
	// on-failure: skip makes the authenticator step aside.
	if _, ok, err := h.Password(ctx, "alice", "pw"); ok || err != nil {
		t.Fatalf("hang under skip: %v %v", ok, err)
	}
	if err := os.Remove(hang); err != nil {
		t.Fatal(err)
	}
	if err := h.Authorize(ctx, Caller{User: "a"}, "m", []Access{{Key: []byte("k")}}, 1); err != nil {
		t.Fatalf("after the hang ended: %v", err)
	}
}

func TestCrashRestarts(t *testing.T) {
	exit := filepath.Join(t.TempDir(), "exit")
	h, reg := start(t, spec("fragile", "authenticator", "--exit-file", exit, "--users", "alice:pw:"))
	ctx := context.Background()
	if _, ok, err := h.Password(ctx, "alice", "pw"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := os.WriteFile(exit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := h.Password(ctx, "alice", "pw")
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), `auth plugin "fragile"`) {
		t.Fatalf("call that crashed the plugin: %v", err)
	}
	if err := os.Remove(exit); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, ok, err := h.Password(ctx, "alice", "pw")
		if ok && err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin not back after a crash: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := testutil.ToFloat64(h.m.restarts.WithLabelValues("fragile")); n < 1 {
		t.Fatalf("restarts = %v", n)
	}
	if n, err := testutil.GatherAndCount(reg, "kvd_auth_plugin_up"); err != nil || n != 1 {
		t.Fatalf("up gauge: %d %v", n, err)
	}
}

func TestStartRefusesBadPlugins(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "plain-file")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    Spec
		want string
	}{
		{"missing", Spec{Name: "gone", Kind: "authenticator", Command: "/nonexistent/kvd-plugin", Timeout: time.Second, OnFailure: OnFailureDeny}, "/nonexistent/kvd-plugin"},
		{"not executable", Spec{Name: "plain", Kind: "authenticator", Command: notExec, Timeout: time.Second, OnFailure: OnFailureDeny}, "permission denied"},
		{"wrong version", spec("v2", "authenticator", "--protocol-version", "2"), "Plugin version: 2"},
		{"wrong kind", func() Spec { s := spec("mixed", "authorizer"); s.Args = []string{"--kind", "authenticator"}; return s }(), "does not serve the authorizer service"},
		{"not a plugin", Spec{Name: "true", Kind: "authorizer", Command: "true", Timeout: time.Second, OnFailure: OnFailureDeny}, "handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Start([]Spec{tc.s}, Options{Logger: zaptest.NewLogger(t)})
			if err == nil {
				h.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), `auth plugin "`+tc.s.Name+`"`) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name the plugin and %q", err, tc.want)
			}
		})
	}
}

func TestSpansAndNoSecrets(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tp.Tracer("test")
	h, err := Start([]Spec{
		spec("sso", "authenticator", "--users", "alice:s3cret-pw:dev"),
		spec("fence", "authorizer", "--deny", "/secret/"),
	}, Options{Logger: zaptest.NewLogger(t), Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	ctx, parent := tr.Start(context.Background(), "kv.Put")
	if _, ok, err := h.Password(ctx, "alice", "s3cret-pw"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, _, err := h.Token(ctx, "tok-alice"); err != nil {
		t.Fatal(err)
	}
	_ = h.Authorize(ctx, Caller{User: "alice"}, "/etcdserverpb.KV/Put", []Access{{Write: true, Key: []byte("/secret/x")}}, 1)
	parent.End()

	got := map[string]string{}
	for _, s := range rec.Ended() {
		if s.Name() == "kv.Put" {
			continue
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not inside the request's span", s.Name())
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
			if strings.Contains(a.Value.Emit(), "s3cret") || strings.Contains(a.Value.Emit(), "tok-alice") {
				t.Errorf("span %s attribute %s holds a secret", s.Name(), a.Key)
			}
		}
		got[s.Name()+"/"+attrs["kvd.auth_plugin.name"]] += attrs["kvd.auth_plugin.result"] + " "
	}
	want := map[string]string{"authplugin.authenticate/sso": "accept accept ", "authplugin.authorize/fence": "deny "}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
}

func TestPluginOutput(t *testing.T) {
	// A JSON line go-plugin's own reader would panic on, and plain lines:
	// logged, never fatal.
	core, logs := observer.New(zapcore.DebugLevel)
	h, err := Start([]Spec{spec("noisy", "authorizer", "--stderr", `{"@message": 1, "@level": "warn", "plugin": "x"}`)},
		Options{Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.Authorize(context.Background(), Caller{User: "a"}, "m", []Access{{Key: []byte("k")}}, 1); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range logs.All() {
		if e.Message == "1" && e.Level == zapcore.WarnLevel {
			found = true
			if e.ContextMap()["plugin"] != "noisy" || e.ContextMap()["plugin.plugin"] != "x" {
				t.Errorf("fields %v: kvd's plugin name, the plugin's own field renamed", e.ContextMap())
			}
		}
	}
	if !found {
		t.Fatalf("the plugin's line is not in the log: %v", logs.All())
	}

	// A plugin that dies at start: kvd's error quotes what it said.
	_, err = Start([]Spec{spec("dies", "authenticator", "--fail-start", "cannot read /etc/htpasswd")}, Options{Logger: zaptest.NewLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "cannot read /etc/htpasswd") {
		t.Fatalf("start error %v does not quote the plugin's output", err)
	}
}

func TestParseLogLine(t *testing.T) {
	for _, c := range []struct {
		line, msg string
		lvl       zapcore.Level
	}{
		{`{"@level":"error","@message":"boom","@module":"m","n":1}`, "boom", zapcore.ErrorLevel},
		{`{"@level":7,"@message":{"a":1}}`, "map[a:1]", zapcore.InfoLevel},
		{`{"no":"message"}`, `{"no":"message"}`, zapcore.InfoLevel},
		{`panic: runtime error`, `panic: runtime error`, zapcore.InfoLevel},
		{`{not json`, `{not json`, zapcore.InfoLevel},
	} {
		msg, lvl, _ := parseLogLine(c.line)
		if msg != c.msg || lvl != c.lvl {
			t.Errorf("%s: %q %v, want %q %v", c.line, msg, lvl, c.msg, c.lvl)
		}
	}
}

func TestAuthorizeScopes(t *testing.T) {
	h, _ := start(t, spec("tenants", "authorizer", "--scope", "/t/alice/", "--deny", "/t/bob/"))
	ctx := context.Background()
	alice := Caller{User: "alice", Roles: []string{"tenant"}}
	put := func(k string) error {
		return h.Authorize(ctx, alice, "/etcdserverpb.KV/Put", []Access{{Write: true, Key: []byte(k)}}, 3)
	}
	for i := range 50 {
		if err := put(fmt.Sprintf("/t/alice/k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls(h, "tenants", "authorizer", "allow"); n != 1 {
		t.Fatalf("50 puts under one allowed scope made %v calls, want 1", n)
	}
	// Outside the scope: asked (and here denied), never taken from it.
	if err := put("/t/bob/x"); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("outside the scope: %v", err)
	}
	// Another method, another kind of access or another caller is asked.
	_ = h.Authorize(ctx, alice, "/etcdserverpb.KV/Range", []Access{{Key: []byte("/t/alice/k1")}}, 3)
	_ = h.Authorize(ctx, Caller{User: "alice"}, "/etcdserverpb.KV/Put", []Access{{Write: true, Key: []byte("/t/alice/k1")}}, 3)
	if n := calls(h, "tenants", "authorizer", "allow"); n != 3 {
		t.Fatalf("allow calls = %v, want 3", n)
	}
	// A new auth revision drops the scopes.
	if err := h.Authorize(ctx, alice, "/etcdserverpb.KV/Put", []Access{{Write: true, Key: []byte("/t/alice/k1")}}, 4); err != nil {
		t.Fatal(err)
	}
	if n := calls(h, "tenants", "authorizer", "allow"); n != 4 {
		t.Fatalf("allow calls after a revision change = %v, want 4", n)
	}
}

func TestScopeContains(t *testing.T) {
	prefix := scope{key: []byte("/a/"), end: []byte("/a0")}
	one := scope{key: []byte("/a/x")}
	all := scope{key: nil, end: []byte{0}}
	for _, c := range []struct {
		s        scope
		key, end string
		want     bool
	}{
		{prefix, "/a/x", "", true},
		{prefix, "/a0", "", false},
		{prefix, "/", "", false},
		{prefix, "/a/", "/a0", true},
		{prefix, "/a/", "/a1", false},
		{prefix, "/a/x", "\x00", false},
		{one, "/a/x", "", true},
		{one, "/a/x", "/a/y", false},
		{one, "/a/y", "", false},
		{all, "", "\x00", true},
		{all, "z", "", true},
	} {
		if got := c.s.contains([]byte(c.key), []byte(c.end)); got != c.want {
			t.Errorf("[%q, %q) in [%q, %q): %v, want %v", c.key, c.end, c.s.key, c.s.end, got, c.want)
		}
	}
}
