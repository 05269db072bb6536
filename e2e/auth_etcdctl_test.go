package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// authCtlTranscriptEnv names a file TestAuthEtcdctl writes the reference's
// outputs to, command by command (docs/etcd-auth-behaviour.md quotes them).
const authCtlTranscriptEnv = "KVD_E2E_AUTH_CTL_TRANSCRIPT"

// Global flags of etcdctl that log in.
var (
	asRoot  = []string{"--user", "root:rootpw"}
	asAlice = []string{"--user", "alice:apw"}
)

func ctlAs(who []string, args ...string) ctlCmd {
	return ctlCmd{args: append(append([]string(nil), who...), args...)}
}

// authEtcdctlScript is every etcdctl v3.7.3 user, role and auth command
// with what it prints on success and on the errors a user meets, in one
// sequence from a fresh store: auth off, enabled (etcdctl creates role root
// itself), used as root, as a user and anonymously, disabled.
var authEtcdctlScript = []ctlCmd{
	ctl("auth", "status"),
	ctl("auth", "status", "-w", "json"),
	ctl("auth", "enable"),
	ctl("user", "add", "root", "--new-user-password", "rootpw"),
	ctl("user", "add", "alice:apw"),
	ctl("user", "add", "alice:other"),
	ctl("user", "add", ":pw"),
	ctl("user", "add", "bob", "--no-password"),
	{args: []string{"user", "add", "carol", "--interactive=false"}, stdin: "cpw\n"},
	ctl("user", "add", "dave", "--new-user-password", strings.Repeat("x", 73)),
	ctl("user", "add", "erin:epw", "-w", "json"),
	ctl("user", "list"),
	ctl("user", "list", "-w", "json"),
	ctl("user", "list", "-w", "table"),
	ctl("role", "add", "r1"),
	ctl("role", "add", "r2"),
	ctl("role", "add", "r1"),
	ctl("role", "add", "r3", "-w", "json"),
	ctl("role", "list"),
	ctl("role", "list", "-w", "json"),
	ctl("role", "grant-permission", "r1", "read", "a/", "--prefix"),
	ctl("role", "grant-permission", "r1", "readwrite", "k1", "k5"),
	ctl("role", "grant-permission", "r1", "write", "f", "--from-key"),
	ctl("role", "grant-permission", "r1", "read", "single"),
	ctl("role", "grant-permission", "r1", "read", "single"),
	ctl("role", "grant-permission", "r2", "readwrite", "", "--prefix"),
	ctl("role", "grant-permission", "r2", "read", "", "--from-key"),
	ctl("role", "grant-permission", "r1", "read", "k5", "k1"),
	ctl("role", "grant-permission", "r1", "bogus", "x"),
	ctl("role", "grant-permission", "nope", "read", "x"),
	ctl("role", "grant-permission", "r1", "read", "x", "--prefix", "--from-key"),
	ctl("role", "grant-permission", "r3", "read", "z", "-w", "json"),
	ctl("role", "get", "r1"),
	ctl("role", "get", "r1", "-w", "json"),
	ctl("role", "get", "r1", "-w", "table"),
	ctl("role", "get", "r2"),
	ctl("role", "get", "nope"),
	ctl("user", "grant-role", "alice", "r1"),
	ctl("user", "grant-role", "alice", "r2"),
	ctl("user", "grant-role", "alice", "r1"),
	ctl("user", "grant-role", "alice", "nope"),
	ctl("user", "grant-role", "nobody", "r1"),
	ctl("user", "grant-role", "erin", "r3", "-w", "json"),
	ctl("user", "get", "alice"),
	ctl("user", "get", "alice", "--detail"),
	ctl("user", "get", "alice", "-w", "json"),
	ctl("user", "get", "alice", "-w", "table"),
	ctl("user", "get", "nobody"),
	ctl("user", "revoke-role", "alice", "r2"),
	ctl("user", "revoke-role", "alice", "r2"),
	ctl("user", "revoke-role", "erin", "r3", "-w", "json"),
	ctl("role", "revoke-permission", "r1", "a/", "--prefix"),
	ctl("role", "revoke-permission", "r1", "k1", "k5"),
	ctl("role", "revoke-permission", "r1", "f", "--from-key"),
	ctl("role", "revoke-permission", "r1", "single"),
	ctl("role", "revoke-permission", "r1", "single"),
	ctl("role", "revoke-permission", "r2", "", "--prefix"),
	ctl("role", "revoke-permission", "nope", "x"),
	ctl("role", "revoke-permission", "r3", "z", "-w", "json"),
	ctl("role", "get", "r1"),
	ctl("role", "grant-permission", "r1", "read", "a/", "--prefix"),
	{args: []string{"user", "passwd", "carol", "--interactive=false"}, stdin: "cpw2\n"},
	{args: []string{"user", "passwd", "nobody", "--interactive=false"}, stdin: "x\n"},
	{args: []string{"user", "passwd", "erin", "--interactive=false", "-w", "json"}, stdin: "epw2\n"},
	ctl("user", "delete", "bob"),
	ctl("user", "delete", "bob"),
	ctl("user", "delete", "erin", "-w", "json"),
	ctl("role", "delete", "r2"),
	ctl("role", "delete", "nope"),
	ctl("role", "delete", "r3", "-w", "json"),
	ctl("auth", "enable"),
	ctl("user", "grant-role", "root", "root"),
	ctl("auth", "enable"),
	ctl("auth", "status"),
	ctl("auth", "status", "-w", "json"),
	ctl("user", "list"),
	ctl("put", "a/1", "x"),
	ctl("get", "a/1"),
	ctlAs(asRoot, "user", "list"),
	ctlAs(asRoot, "role", "list"),
	ctlAs(asRoot, "role", "get", "root"),
	ctlAs(asRoot, "user", "get", "root", "--detail"),
	ctlAs(asRoot, "put", "a/1", "x"),
	ctlAs(asRoot, "auth", "status"),
	ctlAs(asRoot, "auth", "enable"),
	ctlAs(asRoot, "user", "delete", "root"),
	ctlAs(asRoot, "user", "revoke-role", "root", "root"),
	ctlAs(asRoot, "role", "delete", "root"),
	ctlAs([]string{"--user", "root:wrong"}, "user", "list"),
	ctlAs([]string{"--user", "nobody:pw"}, "get", "a/1"),
	ctlAs(asAlice, "get", "a/1"),
	ctlAs(asAlice, "get", "a/", "--prefix"),
	ctlAs(asAlice, "get", "b"),
	ctlAs(asAlice, "put", "a/1", "y"),
	ctlAs(asAlice, "user", "get", "alice"),
	ctlAs(asAlice, "user", "get", "carol"),
	ctlAs(asAlice, "role", "get", "r1"),
	ctlAs(asAlice, "user", "list"),
	ctlAs(asAlice, "user", "passwd", "alice", "--interactive=false"),
	ctlAs(asAlice, "auth", "status"),
	ctlAs(asAlice, "auth", "disable"),
	ctl("auth", "disable"),
	ctlAs(asRoot, "auth", "disable"),
	ctl("auth", "status"),
	ctl("auth", "disable"),
	ctlAs(asRoot, "auth", "status"),
	ctl("user", "list"),
}

// TestAuthEtcdctl runs the unmodified etcdctl v3.7.3 through the user, role
// and auth commands against the server under test and a reference etcd, and
// compares what each command printed and its exit code.
func TestAuthEtcdctl(t *testing.T) {
	t.Parallel()
	bin := harness.EtcdctlBinary(t)
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			ref := newCtlTarget(t, harness.StartEtcd(t, harness.Options{Args: authServerArgs}))
			sut := newCtlTarget(t, harness.StartKVD(t, harness.Options{Engine: engine, Args: authServerArgs}))
			var transcript strings.Builder
			mismatches := 0
			for i, c := range authEtcdctlScript {
				// Both at once: each command waits for its own answer.
				gotc := make(chan ctlResult, 1)
				go func() { gotc <- sut.run(bin, c) }()
				want := ref.run(bin, c)
				got := <-gotc
				fmt.Fprintf(&transcript, "$ etcdctl %s", strings.Join(quoteArgs(c.args), " "))
				if c.stdin != "" {
					fmt.Fprintf(&transcript, " <<< %q", c.stdin)
				}
				fmt.Fprintf(&transcript, "\n%s%s(exit %d)\n\n", want.stdout, want.stderr, want.exit)
				if got != want {
					mismatches++
					t.Errorf("command %d: etcdctl %s (stdin %q): outputs differ\n=== etcd:\n%v=== %s:\n%v",
						i, strings.Join(c.args, " "), c.stdin, want, sut.proc.Label(), got)
				}
				if mismatches >= 10 {
					t.Fatalf("stopping after %d mismatches", mismatches)
				}
			}
			if path := os.Getenv(authCtlTranscriptEnv); path != "" && engine == harness.Engines()[0] {
				if err := os.WriteFile(path, []byte(transcript.String()), 0o644); err != nil {
					t.Errorf("write transcript: %v", err)
				}
			}
		})
	}
}

// quoteArgs quotes the arguments a shell would not take as they are.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \"'\\$") {
			a = fmt.Sprintf("%q", a)
		}
		out[i] = a
	}
	return out
}
