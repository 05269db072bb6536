// Package harness runs kvd, etcd and etcdctl as real processes for the
// process-level tests in the e2e module.
//
// Binaries are built once per test binary run. The server under test is kvd
// unless KVD_E2E_SERVER=etcd, in which case every "kvd" process is an etcd
// v3.7.3 member started with the same flags (less --backend), which proves the
// tests themselves against the reference implementation.
package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// ServerEnv names the environment variable that selects the server under test.
const ServerEnv = "KVD_E2E_SERVER"

// Server kinds accepted in ServerEnv.
const (
	KindKVD  = "kvd"
	KindEtcd = "etcd"
)

// Kind reports which server StartKVD runs: KindKVD (default) or KindEtcd.
// It panics on an unknown value so that a typo never silently tests the
// wrong server.
func Kind() string {
	switch v := os.Getenv(ServerEnv); v {
	case "", KindKVD:
		return KindKVD
	case KindEtcd:
		return KindEtcd
	default:
		panic(fmt.Sprintf("%s=%q: want %q or %q", ServerEnv, v, KindKVD, KindEtcd))
	}
}

// Engines lists the kvd storage engines every storage-facing test runs on.
func Engines() []string { return []string{"bolt", "badger"} }

type buildResult struct {
	once sync.Once
	path string
	err  error
}

var (
	kvdBuild          buildResult
	kvdFailpointBuild buildResult
	etcdBuild         buildResult
	etcdctlBuild      buildResult
	etcdutlBuild      buildResult
)

// e2eDir is the directory of the e2e module, found from this source file so
// that builds work whatever the test's working directory is.
func e2eDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("harness: cannot locate source file")
	}
	return filepath.Dir(filepath.Dir(file))
}

// repoDir is the root of the kvd module.
func repoDir() string { return filepath.Dir(e2eDir()) }

func cacheRoot() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "kvd-e2e")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create build cache dir %s: %w", dir, err)
	}
	return dir, nil
}

// referenceKey identifies the etcd and etcdctl build inputs: the e2e module's
// dependency graph and the etcd main. Same key, same binaries.
func referenceKey() (string, error) {
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum", filepath.Join("cmd", "etcd", "main.go")} {
		b, err := os.ReadFile(filepath.Join(e2eDir(), name))
		if err != nil {
			return "", fmt.Errorf("hash build input %s: %w", name, err)
		}
		h.Write([]byte(name))
		h.Write(b)
	}
	h.Write([]byte(runtime.Version()))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// goBuild runs `go build -o out pkg` in dir, writing to a temporary name
// first so a concurrent or interrupted build never leaves a torn binary.
func goBuild(dir, out, pkg string, flags ...string) error {
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", tmp, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, strings.TrimSpace(string(b)))
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("install %s: %w", out, err)
	}
	return nil
}

func cachedReference(r *buildResult, name, pkg string) (string, error) {
	r.once.Do(func() {
		root, err := cacheRoot()
		if err != nil {
			r.err = err
			return
		}
		key, err := referenceKey()
		if err != nil {
			r.err = err
			return
		}
		dir := filepath.Join(root, "ref-"+key)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			r.err = fmt.Errorf("create %s: %w", dir, err)
			return
		}
		out := filepath.Join(dir, name)
		if _, err := os.Stat(out); err == nil {
			r.path = out
			return
		}
		if err := goBuild(e2eDir(), out, pkg); err != nil {
			r.err = err
			return
		}
		r.path = out
		removeStaleReferences(root, dir)
	})
	return r.path, r.err
}

// EtcdBinary returns the path of the etcd v3.7.3 server binary, building it
// on first use (cached across runs while the e2e go.sum is unchanged).
func EtcdBinary(t testing.TB) string {
	t.Helper()
	p, err := cachedReference(&etcdBuild, "etcd", "./cmd/etcd")
	if err != nil {
		t.Fatalf("build etcd: %v", err)
	}
	return p
}

// EtcdctlBinary returns the path of the unmodified etcdctl v3.7.3 binary.
func EtcdctlBinary(t testing.TB) string {
	t.Helper()
	p, err := cachedReference(&etcdctlBuild, "etcdctl", "go.etcd.io/etcd/etcdctl/v3")
	if err != nil {
		t.Fatalf("build etcdctl: %v", err)
	}
	return p
}

// EtcdutlBinary returns the path of the unmodified etcdutl v3.7.3 binary.
func EtcdutlBinary(t testing.TB) string {
	t.Helper()
	p, err := cachedReference(&etcdutlBuild, "etcdutl", "go.etcd.io/etcd/etcdutl/v3")
	if err != nil {
		t.Fatalf("build etcdutl: %v", err)
	}
	return p
}

// KVDBinary returns the path of kvd built from the repository root. It is
// rebuilt once per test binary run, since kvd changes between runs; Go's
// build cache keeps that cheap.
func KVDBinary(t testing.TB) string {
	t.Helper()
	return buildKVD(t, &kvdBuild, "kvd")
}

// KVDFailpointBinary is KVDBinary built with -tags failpoints: the
// failpoints of pkg/failpoint act as KVD_FAILPOINTS says.
func KVDFailpointBinary(t testing.TB) string {
	t.Helper()
	return buildKVD(t, &kvdFailpointBuild, "kvd-failpoints", "-tags", "failpoints")
}

func buildKVD(t testing.TB, r *buildResult, name string, flags ...string) string {
	t.Helper()
	r.once.Do(func() {
		root, err := cacheRoot()
		if err != nil {
			r.err = err
			return
		}
		sum := sha256.Sum256([]byte(repoDir()))
		dir := filepath.Join(root, "kvd-"+hex.EncodeToString(sum[:])[:16])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			r.err = fmt.Errorf("create kvd build dir %s: %w", dir, err)
			return
		}
		out := filepath.Join(dir, name)
		if err := goBuild(repoDir(), out, "./cmd/kvd", flags...); err != nil {
			r.err = err
			return
		}
		r.path = out
	})
	if r.err != nil {
		t.Fatalf("build %s: %v", name, r.err)
	}
	return r.path
}

// removeStaleReferences deletes reference builds of other dependency
// graphs, which no run will use again.
func removeStaleReferences(root, keep string) {
	dirs, _ := filepath.Glob(filepath.Join(root, "ref-*"))
	for _, d := range dirs {
		if d != keep {
			os.RemoveAll(d)
		}
	}
}
