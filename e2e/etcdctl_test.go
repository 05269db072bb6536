package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// ctlCmd is one etcdctl invocation; stdin feeds `txn -i`.
type ctlCmd struct {
	args  []string
	stdin string
}

func ctl(args ...string) ctlCmd { return ctlCmd{args: args} }

func ctlTxn(stdin string, args ...string) ctlCmd {
	return ctlCmd{args: append([]string{"txn", "-i"}, args...), stdin: stdin}
}

// etcdctlScript is run, command by command, against the server under test
// and a reference etcd; every output must match after normalisation.
var etcdctlScript = []ctlCmd{
	ctl("put", "foo", "bar"),
	ctl("put", "foo", "bar2", "--prev-kv"),
	ctl("put", "foo2", "baz", "-w", "json"),
	ctl("put", "a/1", "x"),
	ctl("put", "a/2", "yy"),
	ctl("put", "a/3", "z"),
	ctl("put", "a/2", "w"),
	ctl("put", "b", "1"),
	ctl("put", "", "x"),
	ctl("put", "k", "v", "--lease", "1234"),
	ctl("get", "foo"),
	ctl("get", "foo", "-w", "json"),
	ctl("get", "foo", "-w", "fields"),
	ctl("get", "nope"),
	ctl("get", "nope", "-w", "json"),
	ctl("get", "a/", "--prefix"),
	ctl("get", "a/", "--prefix", "-w", "json"),
	ctl("get", "a/1", "a/3"),
	ctl("get", "a/", "--prefix", "--limit", "2"),
	ctl("get", "a/", "--prefix", "--limit", "2", "-w", "json"),
	ctl("get", "a/", "--from-key"),
	ctl("get", "", "--from-key", "--keys-only"),
	ctl("get", "foo", "--rev", "2"),
	ctl("get", "foo", "--rev", "3", "-w", "json"),
	ctl("get", "foo", "--rev", "1000"),
	ctl("get", "a/", "--prefix", "--sort-by", "MODIFY", "--order", "DESCEND"),
	ctl("get", "a/", "--prefix", "--sort-by", "VALUE", "--order", "ASCEND"),
	ctl("get", "a/", "--prefix", "--sort-by", "VERSION", "--order", "DESCEND"),
	ctl("get", "a/", "--prefix", "--sort-by", "CREATE", "--order", "DESCEND"),
	ctl("get", "a/", "--prefix", "--sort-by", "KEY", "--order", "DESCEND", "--limit", "2"),
	ctl("get", "a/", "--prefix", "--order", "DESCEND"),
	ctl("get", "a/", "--prefix", "--keys-only"),
	ctl("get", "a/", "--prefix", "--count-only", "-w", "fields"),
	ctl("get", "a/", "--prefix", "--print-value-only"),
	ctl("get", "a/", "--prefix", "--keys-only", "--print-value-only"),
	ctl("get", "a/", "--prefix", "--consistency", "s"),
	ctl("get", "a/", "--prefix", "--max-mod-rev", "5", "-w", "json"),
	ctl("get", "a/", "--prefix", "--min-create-rev", "5"),
	ctlTxn("value(\"foo\") = \"bar2\"\n\nput foo bar3\nget foo\ndel a/1\n\nput foo nope\n\n"),
	ctlTxn("value(\"foo\") = \"bar2\"\n\nput foo bar4\n\nget foo\nget a/ --prefix\n\n"),
	ctlTxn("mod(\"foo\") > \"1\"\nversion(\"a/2\") = \"2\"\ncreate(\"b\") < \"100\"\n\nput x 1\nput y 2\n\n\n", "-w", "json"),
	ctlTxn("value(\"nope\") != \"v\"\n\n\nput z 9\n\n", "-w", "json"),
	ctlTxn("\nput dup 1\nput dup 2\n\n\n"),
	ctl("get", "", "--from-key", "-w", "json"),
	ctl("del", "nope"),
	ctl("del", "a/2", "--prev-kv"),
	ctl("del", "foo", "--prefix", "--prev-kv", "-w", "json"),
	ctl("del", "x", "z"),
	ctl("del", "", "--from-key", "--prev-kv"),
	ctl("get", "", "--from-key"),
	ctl("put", "h", "1"),
	ctl("put", "h", "2"),
	ctl("put", "h", "3"),
	ctl("compaction", "5"),
	ctl("get", "h", "--rev", "4"),
	ctl("get", "h", "--rev", "5", "-w", "json"),
	ctl("compaction", "5"),
	ctl("compaction", "9999"),
	ctl("compaction", "10", "--physical"),
	ctl("get", "h", "--rev", "9"),
	ctl("get", "h", "-w", "json"),
	ctl("endpoint", "status"),
	ctl("endpoint", "status", "-w", "json"),
	ctl("endpoint", "health"),
	ctl("endpoint", "health", "-w", "json"),
	ctl("member", "list"),
	ctl("member", "list", "-w", "json"),
	ctl("member", "list", "-w", "table"),
}

// ctlResult is what one etcdctl run printed, normalised.
type ctlResult struct {
	stdout, stderr string
	exit           int
}

func (r ctlResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.exit, r.stdout, r.stderr)
}

// ctlTarget is one server under etcdctl, with what normalisation replaces.
type ctlTarget struct {
	proc     *harness.Process
	endpoint string
	member   uint64
	cluster  uint64
	replacer *strings.Replacer
}

func newCtlTarget(t *testing.T, p *harness.Process) *ctlTarget {
	t.Helper()
	c := p.Client(t)
	st, err := c.Status(testCtx(t), p.Endpoint())
	mustOK(t, "status", err)
	tg := &ctlTarget{proc: p, endpoint: p.Endpoint(), member: st.Header.MemberId, cluster: st.Header.ClusterId}
	tg.replacer = strings.NewReplacer(
		p.Endpoint(), "<client-url>",
		p.PeerURL(), "<peer-url>",
		strconv.FormatUint(tg.member, 16), "<member-id>",
		strconv.FormatUint(tg.member, 10), "<member-id>",
		strconv.FormatUint(tg.cluster, 16), "<cluster-id>",
		strconv.FormatUint(tg.cluster, 10), "<cluster-id>",
	)
	return tg
}

func (tg *ctlTarget) run(bin string, c ctlCmd) ctlResult {
	args := append([]string{"--endpoints", tg.proc.Endpoint(), "--dial-timeout", "5s", "--command-timeout", "20s"}, c.args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(c.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCDCTL_") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	err := cmd.Run()
	exit := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		// Not an exit status: etcdctl could not be run at all.
		return ctlResult{stderr: fmt.Sprintf("run etcdctl: %v", err), exit: -1}
	}
	return ctlResult{
		stdout: tg.normalize(stdout.String()),
		stderr: tg.normalize(dropClientLogs(stderr.String())),
		exit:   exit,
	}
}

// dropClientLogs removes the client library's JSON log lines (retry
// warnings with timestamps and local ports) from etcdctl's stderr.
func dropClientLogs(s string) string {
	var out []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(l, `{"level":`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

var (
	tookRe       = regexp.MustCompile(`took = [0-9.]+[a-zµ]+`)
	tableRuleRe  = regexp.MustCompile(`[─]+`)
	tableSpaceRe = regexp.MustCompile(` {2,}`)
)

// normalize masks what legitimately differs between two members: ids,
// URLs, raft term and indexes, versions, db sizes and timings. Outputs that
// parse as JSON are rewritten field by field; text outputs by pattern.
func (tg *ctlTarget) normalize(s string) string {
	if j, ok := tg.normalizeJSON(s); ok {
		return j
	}
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		l = tookRe.ReplaceAllString(l, "took = <took>")
		// The simple format of `endpoint status` is one comma-separated row:
		// endpoint, ID, version, storage version, db size, in use,
		// percentage not in use, quota, is leader, is learner, raft term,
		// raft index, raft applied index, errors, downgrade target, enabled.
		if f := strings.Split(l, ", "); len(f) == 16 && tg.endpoint != "" && strings.HasPrefix(l, tg.endpoint) {
			for _, c := range []int{2, 3, 4, 5, 6, 10, 11, 12} {
				f[c] = "<masked>"
			}
			l = strings.Join(f, ", ")
		}
		l = tg.replacer.Replace(l)
		l = tableRuleRe.ReplaceAllString(l, "─")
		l = tableSpaceRe.ReplaceAllString(l, " ")
		lines[i] = l
	}
	return strings.Join(lines, "")
}

// maskedJSONFields are JSON fields whose values differ between members.
var maskedJSONFields = map[string]bool{
	"raft_term": true, "raftTerm": true, "raftIndex": true, "raftAppliedIndex": true,
	"dbSize": true, "dbSizeInUse": true, "version": false, "storageVersion": true, "took": true,
}

func (tg *ctlTarget) normalizeJSON(s string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var docs []any
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", false
		}
		docs = append(docs, v)
	}
	if len(docs) == 0 {
		return "", false
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, d := range docs {
		if err := enc.Encode(tg.maskJSON("", d)); err != nil {
			return "", false
		}
	}
	return b.String(), true
}

func (tg *ctlTarget) maskJSON(field string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			// "version" is both the server's version (a string, masked) and
			// a key's version (a number, kept).
			if _, isStr := e.(string); maskedJSONFields[k] || (k == "version" && isStr) {
				x[k] = "<masked>"
				continue
			}
			x[k] = tg.maskJSON(k, e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = tg.maskJSON(field, e)
		}
		return x
	case json.Number:
		switch string(x) {
		case strconv.FormatUint(tg.member, 10):
			return "<member-id>"
		case strconv.FormatUint(tg.cluster, 10):
			return "<cluster-id>"
		}
		return x
	case string:
		return tg.replacer.Replace(x)
	}
	return v
}

// TestEtcdctl runs the unmodified etcdctl v3.7.3 through one script against
// the server under test and a reference etcd, and compares the outputs.
func TestEtcdctl(t *testing.T) {
	t.Parallel()
	bin := harness.EtcdctlBinary(t)
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			ref := newCtlTarget(t, harness.StartEtcd(t, harness.Options{}))
			sut := newCtlTarget(t, harness.StartKVD(t, harness.Options{Engine: engine}))
			mismatches := 0
			for i, c := range etcdctlScript {
				// Both at once: the commands are independent between members.
				gotc := make(chan ctlResult, 1)
				go func() { gotc <- sut.run(bin, c) }()
				want := ref.run(bin, c)
				got := <-gotc
				if got != want {
					mismatches++
					t.Errorf("command %d: etcdctl %s (stdin %q): outputs differ\n=== etcd:\n%v=== %s:\n%v",
						i, strings.Join(c.args, " "), c.stdin, want, sut.proc.Label(), got)
				}
				if mismatches >= 10 {
					t.Fatalf("stopping after %d mismatches", mismatches)
				}
			}
		})
	}
}

// TestEtcdctlNormalize checks that normalisation masks only what it should.
func TestEtcdctlNormalize(t *testing.T) {
	tg := &ctlTarget{member: 0xbac7efc361f1457e, cluster: 7801232528081817440}
	tg.replacer = strings.NewReplacer("bac7efc361f1457e", "<member-id>", "13458989633860879742", "<member-id>", "7801232528081817440", "<cluster-id>")
	in := `{"header":{"cluster_id":7801232528081817440,"member_id":13458989633860879742,"revision":2,"raft_term":2},"kvs":[{"key":"Zm9v","create_revision":2,"mod_revision":2,"version":1,"value":"YmFy"}],"count":1}` + "\n"
	want := `{"count":1,"header":{"cluster_id":"<cluster-id>","member_id":"<member-id>","raft_term":"<masked>","revision":2},"kvs":[{"create_revision":2,"key":"Zm9v","mod_revision":2,"value":"YmFy","version":1}]}` + "\n"
	if got := tg.normalize(in); got != want {
		t.Errorf("json:\ngot  %s\nwant %s", got, want)
	}
	in = "x is healthy: successfully committed proposal: took = 16.028806ms\nfoo\nbar\n"
	if got, want := tg.normalize(in), "x is healthy: successfully committed proposal: took = <took>\nfoo\nbar\n"; got != want {
		t.Errorf("text:\ngot  %q\nwant %q", got, want)
	}
	if a, b := tg.normalize(`{"header":{"revision":2}}`), tg.normalize(`{"header":{"revision":3}}`); a == b {
		t.Errorf("revision masked: %s", a)
	}
}
