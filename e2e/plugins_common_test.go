package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/codes"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// The auth plugin tests (plugins_*_test.go) run kvd with out-of-process
// authenticators and authorizers (issue #12). etcd has no plugins: they
// are kvd-only.

// plRootPW is root's password in the plugin tests.
const plRootPW = "rootpw"

// plSkipUnlessKVD skips a test of a kvd-only feature when the server under
// test is etcd.
func plSkipUnlessKVD(t *testing.T) {
	t.Helper()
	if harness.Kind() == harness.KindEtcd {
		t.Skip("auth plugins are kvd-only; etcd has none")
	}
}

// plArgs are the kvd flags of a member using the plugin config file cfg.
func plArgs(cfg string) []string {
	return []string{"--config", cfg, "--bcrypt-cost", "4"}
}

// plDuration is for harness.PluginSpec.CacheTTL.
func plDuration(d time.Duration) *time.Duration { return &d }

// plWriteFile writes data to path or fails the test.
func plWriteFile(t *testing.T, path, data string) {
	t.Helper()
	// Through a rename, so that a plugin re-reading the file never sees it
	// half written.
	tmp := path + ".tmp"
	mustOK(t, "write "+tmp, os.WriteFile(tmp, []byte(data), 0o644))
	mustOK(t, "rename "+tmp, os.Rename(tmp, path))
}

// plHtpasswdLine is one Apache htpasswd entry for user with a bcrypt hash of
// pw (cost 4, "$2y$" prefix as Apache's htpasswd -B writes it).
func plHtpasswdLine(t *testing.T, user, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	mustOK(t, "bcrypt", err)
	return user + ":" + "$2y$" + strings.TrimPrefix(string(h), "$2a$") + "\n"
}

// plEnableAuth adds root (role root) with plRootPW, runs setup (roles,
// users, keys) as the still-anonymous admin, then enables auth.
func plEnableAuth(t *testing.T, c *clientv3.Client, setup func(ctx context.Context) error) {
	t.Helper()
	ctx := testCtx(t)
	_, err := c.UserAdd(ctx, "root", plRootPW)
	mustOK(t, "user add root", err)
	_, err = c.UserGrantRole(ctx, "root", "root")
	mustOK(t, "grant root", err)
	if setup != nil {
		mustOK(t, "auth setup", setup(ctx))
	}
	_, err = c.AuthEnable(ctx)
	mustOK(t, "auth enable", err)
}

// plAddRole adds role with permission perm on every key under prefix.
func plAddRole(ctx context.Context, c *clientv3.Client, role, prefix string, perm clientv3.PermissionType) error {
	if _, err := c.RoleAdd(ctx, role); err != nil {
		return fmt.Errorf("role add %s: %w", role, err)
	}
	if _, err := c.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), perm); err != nil {
		return fmt.Errorf("grant %s on %s: %w", role, prefix, err)
	}
	return nil
}

// plUserClient is a client on endpoints that authenticates as user with pw;
// closed in t.Cleanup.
func plUserClient(t *testing.T, user, pw string, endpoints ...string) (*clientv3.Client, error) {
	t.Helper()
	cfg := harness.ClientConfig(endpoints...)
	cfg.Username, cfg.Password = user, pw
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// plMustUserClient is plUserClient failing the test on error.
func plMustUserClient(t *testing.T, user, pw string, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := plUserClient(t, user, pw, endpoints...)
	mustOK(t, "client as "+user, err)
	return c
}

// plTokenClient is a client on endpoints that sends tok as is (etcdctl's
// --auth-jwt-token); closed in t.Cleanup.
func plTokenClient(t *testing.T, tok string, endpoints ...string) *clientv3.Client {
	t.Helper()
	cfg := harness.ClientConfig(endpoints...)
	cfg.Token = tok
	c, err := clientv3.New(cfg)
	mustOK(t, "client with a token", err)
	t.Cleanup(func() { c.Close() })
	return c
}

// plEtcdctl runs the unmodified etcdctl against endpoint.
func plEtcdctl(t *testing.T, endpoint string, args ...string) ctlResult {
	t.Helper()
	all := append([]string{"--endpoints", endpoint, "--dial-timeout", "5s", "--command-timeout", "15s"}, args...)
	cmd := exec.Command(harness.EtcdctlBinary(t), all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = etcdctlEnv()
	err := cmd.Run()
	exit := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run etcdctl: %v", err)
	}
	return ctlResult{stdout: stdout.String(), stderr: dropClientLogs(stderr.String()), exit: exit}
}

// plWantCtlOK asserts etcdctl succeeded and printed want (trimmed) when want
// is not empty.
func plWantCtlOK(t *testing.T, what string, r ctlResult, want string) {
	t.Helper()
	if r.exit != 0 || (want != "" && strings.TrimSpace(r.stdout) != want) {
		t.Errorf("%s: %s\nwant exit 0 and %q", what, r, want)
	}
}

// plWantCtlErr asserts etcdctl failed with msg on stderr.
func plWantCtlErr(t *testing.T, what string, r ctlResult, msg string) {
	t.Helper()
	if r.exit == 0 || !strings.Contains(r.stderr, msg) {
		t.Errorf("%s: %s\nwant a failure with %q", what, r, msg)
	}
}

// plWantFailure asserts err is the on-failure: deny error of plugin name:
// gRPC code code and a message naming the plugin and cause.
func plWantFailure(t *testing.T, what string, err error, code codes.Code, name, cause string) {
	t.Helper()
	if e := plFailureErr(err, code, name, cause); e != nil {
		t.Errorf("%s: %v", what, e)
	}
}

// plFailureErr says how err differs from plugin name's on-failure: deny
// error; nil when it is that error.
func plFailureErr(err error, code codes.Code, name, cause string) error {
	if err == nil {
		return fmt.Errorf("no error, want plugin %q's on-failure error", name)
	}
	gotCode, msg := errCodeMsg(err)
	prefix := fmt.Sprintf("kvd: auth plugin %q failed (on-failure: deny): ", name)
	if gotCode != code || !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, cause) {
		return fmt.Errorf("got (%v) %q, want (%v) %q...%q", gotCode, msg, code, prefix, cause)
	}
	return nil
}

// plMetric is the sum of the samples of metric name on endpoint's
// /metrics whose labels include every pair of labels ("k", "v", ...); -1
// when there is no such sample.
func plMetric(t *testing.T, endpoint, name string, labels ...string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/metrics", nil)
	mustOK(t, "metrics request", err)
	resp, err := http.DefaultClient.Do(req)
	mustOK(t, "GET /metrics", err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	mustOK(t, "read /metrics", err)
	sum, found := 0.0, false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
lines:
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) {
			continue
		}
		rest := l[len(name):]
		var lbl string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			lbl, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this one's name as a prefix
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(","+lbl+",", ","+labels[i]+"="+strconv.Quote(labels[i+1])+",") {
				continue lines
			}
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	if !found {
		return -1
	}
	return sum
}

// plCountLines is the number of lines in path (0 when it does not exist):
// testplugin --count-file writes one per call.
func plCountLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// plTempPath is a path in a fresh temporary directory, not created.
func plTempPath(t *testing.T, name string) string {
	return filepath.Join(t.TempDir(), name)
}
