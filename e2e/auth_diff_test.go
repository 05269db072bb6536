package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Environment knobs of the auth differential test.
const (
	authDiffSeedsEnv = "KVD_E2E_AUTH_DIFF_SEEDS" // comma-separated seeds, default "1,2,3"
	authDiffOpsEnv   = "KVD_E2E_AUTH_DIFF_OPS"   // actions per seed, default 400
)

// authServerArgs are given to both servers: the cheapest bcrypt cost keeps
// the many password hashes and checks of the sequence fast.
var authServerArgs = []string{"--bcrypt-cost", "4"}

// TestAuthDifferential runs one seeded random sequence of Auth admin
// requests (users and roles added, deleted, granted and revoked, passwords
// changed, permissions on keys, prefixes, from-key and plain ranges granted
// and revoked, auth enabled and disabled) and KV requests (Range, Put,
// DeleteRange, Txn, Compact), sent by root, by three users each over a
// connection of its own and by a client that never authenticates, against
// the server under test and etcd v3.7.3 side by side from fresh stores, and
// requires identical responses (headers' member_id, cluster_id and raft_term
// zeroed, the token of an AuthenticateResponse masked) or identical errors
// (gRPC code and message). Both members restart halfway, which drops every
// token.
//
// A client holds one token per server. It authenticates before a request
// when it holds none and auth is on, and like clientv3 it authenticates
// again and retries once when a request fails with "invalid auth token" or
// "revision of auth store is old"; every one of these requests goes to both
// servers and is compared too.
func TestAuthDifferential(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv(authDiffSeedsEnv); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("%s=%q: %v", authDiffSeedsEnv, s, err)
			}
			seeds = append(seeds, v)
		}
	}
	nops := 400
	if s := os.Getenv(authDiffOpsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", authDiffOpsEnv, s, err)
		}
		nops = v
	}
	for _, engine := range harness.Engines() {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", engine, seed), func(t *testing.T) {
				runAuthDifferential(t, engine, seed, nops)
			})
		}
	}
}

// authClient is one identity of the sequence with a connection of its own
// to each server; index 0 is the reference, 1 the server under test.
type authClient struct {
	name   string // user it logs in as; "" never logs in
	stubs  [2]authStubs
	tokens [2]string // current token per server, "" for none
}

func (c *authClient) String() string {
	if c.name == "" {
		return "no user"
	}
	return c.name
}

// authRun is one seed's run.
type authRun struct {
	t          *testing.T
	seed       uint64
	procs      [2]*harness.Process
	clients    []*authClient
	gen        *authGen
	op         int // index of the current action: -1 in the bootstrap, nops in the finale
	requests   int
	enabledOps int // actions sent while auth was on
	mismatches int
	counts     map[string]int
	digest     hash.Hash
}

func runAuthDifferential(t *testing.T, engine string, seed uint64, nops int) {
	r := newAuthRun(t, engine, seed)
	for _, a := range r.gen.bootstrap() {
		r.exec(a)
	}
	for i := range nops {
		r.op = i
		if i == nops/2 {
			r.restart()
		}
		if r.gen.enabled {
			r.enabledOps++
		}
		r.exec(r.gen.next())
	}
	r.op = nops
	for _, a := range r.gen.finale() {
		r.exec(a)
	}
	t.Logf("seed %d: %d actions (%d with auth on), %d requests, digest %x\n%v",
		seed, nops, r.enabledOps, r.requests, r.digest.Sum(nil)[:8], r.counts)
}

// newAuthRun starts a reference etcd and the server under test on engine,
// from fresh stores, and connects the clients to both.
func newAuthRun(t *testing.T, engine string, seed uint64) *authRun {
	ref := harness.StartEtcd(t, harness.Options{Args: authServerArgs})
	sut := harness.StartKVD(t, harness.Options{Engine: engine, Args: authServerArgs})
	r := &authRun{
		t:      t,
		seed:   seed,
		procs:  [2]*harness.Process{ref, sut},
		gen:    newAuthGen(&opGen{rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)), rev: 1}),
		op:     -1,
		counts: map[string]int{},
		digest: sha256.New(),
	}
	for _, name := range authClientNames {
		c := &authClient{name: name}
		for side, p := range r.procs {
			c.stubs[side] = dialAuthStubs(t, p)
		}
		r.clients = append(r.clients, c)
	}
	return r
}

// restart stops both members and starts them again on their data; every
// token is gone afterwards.
func (r *authRun) restart() {
	for _, p := range r.procs {
		p.Stop()
	}
	for _, p := range r.procs {
		p.Start()
	}
	for side, p := range r.procs {
		waitAuthReady(r.t, p, r.clients[authRootClient].stubs[side])
	}
}

// exec sends one action, with the logins around it that its client needs.
func (r *authRun) exec(a authAction) {
	c := r.clients[a.client]
	if login, ok := a.req.(*pb.AuthenticateRequest); ok {
		r.authenticate(c, login, false)
		return
	}
	if c.name != "" && c.tokens[0] == "" && r.gen.enabled {
		r.authenticate(c, r.gen.authenticate(c.name), true)
	}
	resp, err := r.step(c, a.req)
	if c.name != "" && needsReauth(err) && r.authenticate(c, r.gen.authenticate(c.name), true) {
		resp, err = r.step(c, a.req)
	}
	r.gen.observe(a.req, resp, err)
}

// authenticate logs c in on both servers and keeps each server's new
// token. Like clientv3, which attaches its token to every call, c still
// sends the token it holds with the login. When that token is known to be
// bad (drop), a failed login leaves c with none; otherwise c keeps it. It
// reports whether the reference accepted the login.
func (r *authRun) authenticate(c *authClient, req *pb.AuthenticateRequest, drop bool) bool {
	ref, sut := r.send(c, req)
	for side, res := range [2]authResult{ref, sut} {
		switch {
		case res.err == nil:
			c.tokens[side] = res.resp.(*pb.AuthenticateResponse).Token
		case drop:
			c.tokens[side] = ""
		}
	}
	return ref.err == nil
}

type authResult struct {
	resp proto.Message
	err  error
}

// step sends req from c to both servers and returns the reference's answer.
func (r *authRun) step(c *authClient, req proto.Message) (proto.Message, error) {
	ref, _ := r.send(c, req)
	return ref.resp, ref.err
}

// send sends req from c to both servers at once, each with c's token for
// it, and compares the answers.
func (r *authRun) send(c *authClient, req proto.Message) (ref, sut authResult) {
	t := r.t
	t.Helper()
	r.requests++
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sutc := make(chan authResult, 1)
	go func() {
		m, err := authCall(tokenCtx(ctx, c.tokens[1]), c.stubs[1], req)
		sutc <- authResult{m, err}
	}()
	m, err := authCall(tokenCtx(ctx, c.tokens[0]), c.stubs[0], req)
	ref = authResult{m, err}
	sut = <-sutc
	where := fmt.Sprintf("seed %d op %d (request %d)", r.seed, r.op, r.requests)
	with := "without a token"
	if c.tokens[0] != "" {
		with = "with its token"
	}
	what := fmt.Sprintf("%s as %s, %s: %v", authKind(req), c, with, req)

	// A server that did not answer may be on its way out: give it the
	// time to exit, so that a crash is reported as one.
	for side, res := range [2]authResult{ref, sut} {
		if noAnswer(res.err) {
			r.procs[side].WaitExit(5 * time.Second)
		}
	}
	// etcd v3.7.3 panics on some requests (Txn shapes among them); that
	// is the reference failing, which says nothing of the server under test.
	if exited, how := r.procs[0].Exited(); exited {
		t.Fatalf("%s: the reference crashed (etcd exited: %v) on %s\netcd's answer: %s\n%s's answer: %s\n(this says nothing about %s; the sequence cannot go on without a reference)",
			where, how, what, fmtAuthResult(ref.resp, ref.err), r.procs[1].Label(), fmtAuthResult(sut.resp, sut.err), r.procs[1].Label())
	}
	if exited, how := r.procs[1].Exited(); exited {
		t.Fatalf("%s: %s exited (%v) on %s\netcd: %s\n%s: %s",
			where, r.procs[1].Label(), how, what, fmtAuthResult(ref.resp, ref.err), r.procs[1].Label(), fmtAuthResult(sut.resp, sut.err))
	}
	// A timed-out request on both sides would compare equal and prove nothing.
	for _, e := range []error{ref.err, sut.err} {
		if noAnswer(e) {
			t.Fatalf("%s: %s: no answer: %v (etcd: %s; %s: %s)",
				where, what, e, fmtAuthResult(ref.resp, ref.err), r.procs[1].Label(), fmtAuthResult(sut.resp, sut.err))
		}
	}
	if why := diffResults(maskToken(ref.resp), ref.err, maskToken(sut.resp), sut.err); why != "" {
		r.mismatches++
		report := t.Errorf
		// After a request that may have changed state differently on the
		// two sides (a store, an auth store, a client's token), later
		// differences say nothing new.
		if !authReadOnly(req) && !(ref.err != nil && sut.err != nil) || r.mismatches >= maxDiffMismatches {
			report = t.Fatalf
		}
		report("%s: responses differ (%s)\nrequest: %s\netcd: %s\n%s: %s",
			where, why, what, fmtAuthResult(ref.resp, ref.err), r.procs[1].Label(), fmtAuthResult(sut.resp, sut.err))
	}

	kind := authKind(req)
	r.counts[kind]++
	if ref.err != nil {
		_, msg := errCodeMsg(ref.err)
		r.counts[kind+" error "+msg]++
	}
	// The digest covers the requests and the reference's answers: two runs
	// of one seed must print the same one.
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	fmt.Fprintf(r.digest, "%t %s %s %x|", c.tokens[0] != "", c, kind, b)
	if ref.err != nil {
		code, msg := errCodeMsg(ref.err)
		fmt.Fprintf(r.digest, "error %v %s|", code, msg)
	} else {
		a := proto.Clone(maskToken(ref.resp))
		zeroMemberFields(a.ProtoReflect())
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
		fmt.Fprintf(r.digest, "%x|", b)
	}
	return ref, sut
}
