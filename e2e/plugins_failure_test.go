package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// notAHang bounds a call that must come back with its plugin's timeout
// (200ms here) rather than hang: generous for a loaded 2-core machine.
const notAHang = 3 * time.Second

// TestPluginsKillUnderLoad: SIGKILL of an authorizer plugin (on-failure
// deny, no cache) while 4 clients write: during the outage some writes fail
// with the plugin's on-failure error and nothing else, kvd restarts the
// plugin (a new process, counted in kvd_auth_plugin_restarts_total) and
// writes succeed again within seconds, the plugin's denials are back, every
// acknowledged write is there, and kvd never stopped.
func TestPluginsKillUnderLoad(t *testing.T) {
	plSkipUnlessKVD(t)
	bin := harness.PluginBinary(t, "testplugin")
	cfg := harness.WritePluginConfig(t, harness.PluginSpec{
		Name:     "authz",
		Kind:     "authorizer",
		Command:  bin,
		Args:     []string{"--kind", "authorizer", "--deny", "/forbidden/"},
		CacheTTL: plDuration(0),
	})
	p := harness.StartKVD(t, harness.Options{Engine: "bolt", Args: plArgs(cfg)})
	admin := p.Client(t)
	plEnableAuth(t, admin, func(ctx context.Context) error {
		if err := plAddRole(ctx, admin, "load", "/", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return err
		}
		if _, err := admin.UserAdd(ctx, "writer", "writer-pw"); err != nil {
			return err
		}
		_, err := admin.UserGrantRole(ctx, "writer", "load")
		return err
	})
	ep := p.Endpoint()
	ctx := testCtx(t)
	w := plMustUserClient(t, "writer", "writer-pw", ep)
	_, err := w.Put(ctx, "/forbidden/x", "x")
	wantErr(t, "put /forbidden/x before the kill", err, rpctypes.ErrPermissionDenied)

	pids := p.PluginPIDs(bin)
	if len(pids) != 1 {
		t.Fatalf("plugin processes of kvd (pid %d): %v, want one", p.PID(), pids)
	}

	const writers = 4
	var (
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		mu        sync.Mutex
		acked     []string
		failures  int // the plugin's on-failure errors
		sample    string
		unexpectd []string
	)
	prefix := `kvd: auth plugin "authz" failed (on-failure: deny): `
	for g := range writers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("/load/%d/%06d", g, n)
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := w.Put(pctx, key, "v")
				cancel()
				mu.Lock()
				switch code, msg := errCodeMsg(err); {
				case err == nil:
					acked = append(acked, key)
				case code == codes.PermissionDenied && strings.HasPrefix(msg, prefix):
					failures++
					sample = msg
				default:
					if len(unexpectd) < 10 {
						unexpectd = append(unexpectd, fmt.Sprintf("%s: (%v) %s", key, code, msg))
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	ackedNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	eventually(t, "writes before the kill", 10*time.Second, func() error {
		if n := ackedNow(); n < 100 {
			return fmt.Errorf("%d acknowledged", n)
		}
		return nil
	})
	mustOK(t, "kill -9 the plugin", syscall.Kill(pids[0], syscall.SIGKILL))
	killed := time.Now()
	eventually(t, "plugin restarted and writes succeeding again", 15*time.Second, func() error {
		now := p.PluginPIDs(bin)
		if len(now) != 1 || now[0] == pids[0] {
			return fmt.Errorf("plugin processes %v (killed %d)", now, pids[0])
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := w.Put(pctx, "/probe", "p")
		return err
	})
	t.Logf("plugin serving again %v after the kill", time.Since(killed).Round(time.Millisecond))
	before := ackedNow()
	eventually(t, "writers succeeding after the restart", 10*time.Second, func() error {
		if n := ackedNow(); n < before+100 {
			return fmt.Errorf("%d acknowledged since the restart", n-before)
		}
		return nil
	})
	close(stop)
	wg.Wait()

	t.Logf("%d writes acknowledged, %d failed with the on-failure error (e.g. %q)", len(acked), failures, sample)
	if failures == 0 {
		t.Errorf("no write failed with %q while the plugin was down", prefix)
	}
	if len(unexpectd) > 0 {
		t.Errorf("writes failed otherwise than with the on-failure error:\n%s", strings.Join(unexpectd, "\n"))
	}
	// The restarted plugin decides again: its denial is back.
	_, err = w.Put(ctx, "/forbidden/y", "y")
	wantErr(t, "put /forbidden/y after the restart", err, rpctypes.ErrPermissionDenied)

	root := plMustUserClient(t, "root", plRootPW, ep)
	resp, err := root.Get(ctx, "/load/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	mustOK(t, "root get /load/", err)
	have := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	var lost []string
	for _, k := range acked {
		if !have[k] {
			lost = append(lost, k)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged writes lost, e.g. %v", len(lost), lost[:min(5, len(lost))])
	}
	// (A range from "/" is not under /forbidden/, which the plugin denies
	// root too.)
	if all, err := root.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err != nil {
		t.Errorf("root get /: %v", err)
	} else {
		for _, kv := range all.Kvs {
			if strings.HasPrefix(string(kv.Key), "/forbidden/") {
				t.Errorf("%s written despite the plugin's deny", kv.Key)
			}
		}
	}
	if exited, werr := p.Exited(); exited {
		t.Fatalf("kvd exited: %v", werr)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_restarts_total", "plugin", "authz"); n < 1 {
		t.Errorf("kvd_auth_plugin_restarts_total{plugin=authz}: %v, want at least 1", n)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_up", "plugin", "authz"); n != 1 {
		t.Errorf("kvd_auth_plugin_up{plugin=authz}: %v, want 1", n)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_calls_total", "plugin", "authz", "result", "failure"); n < float64(failures) {
		t.Errorf("kvd_auth_plugin_calls_total{plugin=authz,result=failure}: %v, want at least %d", n, failures)
	}
}

// TestPluginsHang: plugins that hang (testplugin --hang-file) behind a
// 200ms timeout. A hanging authorizer under on-failure deny fails the call
// with PermissionDenied naming it and "timed out after 200ms", quickly; a
// hanging authenticator fails Authenticate and raw tokens with
// Unauthenticated the same way; a hanging authorizer under on-failure skip
// is passed over (its denial does not apply while it hangs). Once the files
// are gone, the calls succeed (or are denied by the plugin) again.
func TestPluginsHang(t *testing.T) {
	plSkipUnlessKVD(t)
	bin := harness.PluginBinary(t, "testplugin")
	dir := t.TempDir()
	hangAuthn, hangAuthz, hangSkip := dir+"/hang-authn", dir+"/hang-authz", dir+"/hang-skip"
	cfg := harness.WritePluginConfig(t,
		harness.PluginSpec{
			Name: "authn", Kind: "authenticator", Command: bin,
			Args:    []string{"--kind", "authenticator", "--users", "alice:alice-pw:app", "--hang-file", hangAuthn},
			Timeout: 200 * time.Millisecond, CacheTTL: plDuration(0),
		},
		harness.PluginSpec{
			Name: "authz", Kind: "authorizer", Command: bin,
			Args:    []string{"--kind", "authorizer", "--hang-file", hangAuthz},
			Timeout: 200 * time.Millisecond, CacheTTL: plDuration(0),
		},
		harness.PluginSpec{
			Name: "authz-skip", Kind: "authorizer", Command: bin,
			Args:    []string{"--kind", "authorizer", "--deny", "/app/blocked/", "--hang-file", hangSkip},
			Timeout: 200 * time.Millisecond, CacheTTL: plDuration(0), OnFailure: "skip",
		},
	)
	p := harness.StartKVD(t, harness.Options{Engine: "bolt", Args: plArgs(cfg)})
	admin := p.Client(t)
	plEnableAuth(t, admin, func(ctx context.Context) error {
		return plAddRole(ctx, admin, "app", "/app/", clientv3.PermissionType(clientv3.PermReadWrite))
	})
	ep := p.Endpoint()
	ctx := testCtx(t)
	alice := plMustUserClient(t, "alice", "alice-pw", ep)
	if _, err := alice.Put(ctx, "/app/x", "1"); err != nil {
		t.Fatalf("alice put /app/x: %v", err)
	}
	_, err := alice.Put(ctx, "/app/blocked/x", "1")
	wantErr(t, "alice put /app/blocked/x", err, rpctypes.ErrPermissionDenied)

	touch := func(f string) { t.Helper(); plWriteFile(t, f, "") }
	const timedOut = "timed out after 200ms"
	failed := func(code codes.Code, name string) func(error) error {
		return func(err error) error { return plFailureErr(err, code, name, timedOut) }
	}

	// The deny authorizer hangs.
	touch(hangAuthz)
	hangAttempts(t, "put with authz hanging", func() error { _, err := alice.Put(ctx, "/app/y", "2"); return err },
		failed(codes.PermissionDenied, "authz"))
	hangAttempts(t, "get with authz hanging", func() error { _, err := alice.Get(ctx, "/app/x"); return err },
		failed(codes.PermissionDenied, "authz"))
	mustOK(t, "remove the hang file", os.Remove(hangAuthz))
	eventually(t, "put after authz stopped hanging", 10*time.Second, func() error {
		_, err := alice.Put(ctx, "/app/y", "2")
		return err
	})

	// The skip authorizer hangs: its denial is passed over meanwhile.
	touch(hangSkip)
	hangAttempts(t, "put /app/blocked/z with authz-skip hanging", func() error { _, err := alice.Put(ctx, "/app/blocked/z", "3"); return err },
		func(err error) error { return err })
	mustOK(t, "remove the hang file", os.Remove(hangSkip))
	eventually(t, "authz-skip denying again", 10*time.Second, func() error {
		_, err := alice.Put(ctx, "/app/blocked/w", "4")
		if code, msg := errCodeMsg(err); code != codes.PermissionDenied || msg != "etcdserver: permission denied" {
			return fmt.Errorf("put /app/blocked/w: %v", err)
		}
		return nil
	})

	// The authenticator hangs: passwords and raw tokens both.
	touch(hangAuthn)
	hangAttempts(t, "authenticate alice with authn hanging", func() error { _, err := admin.Authenticate(ctx, "alice", "alice-pw"); return err },
		failed(codes.Unauthenticated, "authn"))
	tokCli := plTokenClient(t, "tok-alice", ep)
	hangAttempts(t, "raw token with authn hanging", func() error { _, err := tokCli.Get(ctx, "/app/x"); return err },
		failed(codes.Unauthenticated, "authn"))
	// alice's kvd token was issued before: requests with it need no
	// authenticator.
	if _, err := alice.Get(ctx, "/app/x"); err != nil {
		t.Errorf("alice's earlier token with authn hanging: %v", err)
	}
	mustOK(t, "remove the hang file", os.Remove(hangAuthn))
	eventually(t, "authenticate after authn stopped hanging", 10*time.Second, func() error {
		_, err := admin.Authenticate(ctx, "alice", "alice-pw")
		return err
	})
	if _, err := tokCli.Get(ctx, "/app/x"); err != nil {
		t.Errorf("raw token after authn stopped hanging: %v", err)
	}

	root := plMustUserClient(t, "root", plRootPW, ep)
	resp, err := root.Get(ctx, "/app/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	mustOK(t, "root get /app/", err)
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if want := []string{"/app/blocked/z", "/app/x", "/app/y"}; !slices.Equal(keys, want) {
		t.Errorf("keys under /app/: %v, want %v", keys, want)
	}
	if n := plMetric(t, ep, "kvd_auth_plugin_calls_total", "plugin", "authz", "result", "failure"); n < 2 {
		t.Errorf("kvd_auth_plugin_calls_total{plugin=authz,result=failure}: %v, want at least 2", n)
	}
	if exited, werr := p.Exited(); exited {
		t.Fatalf("kvd exited: %v", werr)
	}
}

// hangAttempts runs attempt once against a hanging plugin: it must return
// within notAHang with the error want accepts. (testplugin never answers a
// call it hangs: it fails it once kvd gives up.)
func hangAttempts(t *testing.T, what string, attempt func() error, want func(error) error) {
	t.Helper()
	start := time.Now()
	err := attempt()
	if d := time.Since(start); d > notAHang {
		t.Errorf("%s: took %v: a hang, not the plugin's 200ms timeout", what, d)
		return
	}
	if e := want(err); e != nil {
		t.Errorf("%s: %v", what, e)
	}
}

// TestPluginsMisbehaving: an authenticator answering no decision at all
// (testplugin --garbage) or accepting with an empty user name
// (--empty-identity) lets nobody in, and an authorizer answering no
// verdict lets nothing through.
func TestPluginsMisbehaving(t *testing.T) {
	plSkipUnlessKVD(t)
	bin := harness.PluginBinary(t, "testplugin")
	for _, flag := range []string{"--garbage", "--empty-identity"} {
		t.Run("authenticator"+flag, func(t *testing.T) {
			cfg := harness.WritePluginConfig(t, harness.PluginSpec{
				Name: "odd", Kind: "authenticator", Command: bin,
				Args: []string{"--kind", "authenticator", "--users", "alice:alice-pw:root", flag},
			})
			p := harness.StartKVD(t, harness.Options{Engine: "bolt", Args: plArgs(cfg)})
			admin := p.Client(t)
			plEnableAuth(t, admin, func(ctx context.Context) error {
				_, err := admin.Put(ctx, "/app/x", "1")
				return err
			})
			ctx := testCtx(t)
			for _, who := range [][2]string{{"alice", "alice-pw"}, {"nobody", "x"}} {
				if resp, err := admin.Authenticate(ctx, who[0], who[1]); err == nil {
					t.Errorf("authenticate %s: accepted (token %q)", who[0], resp.Token)
				}
			}
			for _, tok := range []string{"tok-alice", "anything"} {
				cli := plTokenClient(t, tok, p.Endpoint())
				if _, err := cli.Put(ctx, "/app/x", "2"); err == nil {
					t.Errorf("put with raw token %q: accepted", tok)
				}
			}
			if exited, werr := p.Exited(); exited {
				t.Fatalf("kvd exited: %v", werr)
			}
		})
	}
	t.Run("authorizer--garbage", func(t *testing.T) {
		cfg := harness.WritePluginConfig(t, harness.PluginSpec{
			Name: "odd", Kind: "authorizer", Command: bin,
			Args: []string{"--kind", "authorizer", "--garbage"},
		})
		p := harness.StartKVD(t, harness.Options{Engine: "bolt", Args: plArgs(cfg)})
		admin := p.Client(t)
		plEnableAuth(t, admin, func(ctx context.Context) error {
			if err := plAddRole(ctx, admin, "app", "/app/", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
				return err
			}
			if _, err := admin.UserAdd(ctx, "alice", "alice-pw"); err != nil {
				return err
			}
			_, err := admin.UserGrantRole(ctx, "alice", "app")
			return err
		})
		ctx := testCtx(t)
		alice := plMustUserClient(t, "alice", "alice-pw", p.Endpoint())
		_, err := alice.Put(ctx, "/app/x", "1")
		wantErr(t, "alice put /app/x", err, rpctypes.ErrPermissionDenied)
		_, err = alice.Get(ctx, "/app/x")
		wantErr(t, "alice get /app/x", err, rpctypes.ErrPermissionDenied)
	})
}
