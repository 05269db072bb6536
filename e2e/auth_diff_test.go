package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"hash"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Environment knobs of the auth differential test.
const (
	authDiffSeedsEnv = "KVD_E2E_AUTH_DIFF_SEEDS" // comma-separated seeds, default "1,2,3"
	authDiffOpsEnv   = "KVD_E2E_AUTH_DIFF_OPS"   // actions per seed, default 400
	// authDiffTokensEnv: comma-separated token providers to run the seeds
	// with, default "simple,jwt" (JWT with the first seed only unless
	// KVD_E2E_AUTH_DIFF_SEEDS is set).
	authDiffTokensEnv = "KVD_E2E_AUTH_DIFF_TOKENS"
	// authDiffVerboseEnv, when set, logs every request and both answers
	// (with -v): the trace to minimize a difference from.
	authDiffVerboseEnv = "KVD_E2E_AUTH_DIFF_VERBOSE"
)

// authServerArgs are given to both servers: the cheapest bcrypt cost keeps
// the many password hashes and checks of the sequence fast.
var authServerArgs = []string{"--bcrypt-cost", "4"}

// TestAuthDifferential runs one seeded random sequence against the server
// under test and etcd v3.7.3 side by side from fresh stores, and requires
// identical responses (headers' member_id, cluster_id and raft_term zeroed,
// the token of an AuthenticateResponse masked, the fields normAuthResp
// names reduced to what etcd's semantics fix) or identical errors (gRPC code
// and message). The requests, sent by root, by three users each over a
// connection of its own and by a client that never authenticates:
//
//   - Auth admin: users and roles added, deleted, granted and revoked,
//     passwords changed, permissions on keys, prefixes, from-key and plain
//     ranges granted and revoked, auth enabled and disabled, logins;
//   - KV: Range (revision, limit, count_only, sorts, filters), RangeStream,
//     Put, DeleteRange, Txn (nested, prev_kv deletes), Compact, some puts
//     with the sequence's leases;
//   - Watch: creates on permitted, unpermitted, prefix, from-key and
//     inverted ranges, from the current, a future, a compacted or a
//     negative revision, one to three on a stream, a progress request, each
//     created watch canceled; every answer up to the cancels is compared;
//   - Lease: grant (IDs picked by the generator), puts and txns attaching
//     keys, ignore_lease puts, revoke, keep-alive, time-to-live with and
//     without keys, leases;
//   - Maintenance and Cluster: Status, Alarm GET and DEACTIVATE, Hash,
//     HashKV, Defragment, Snapshot, MoveLeader, MemberList and membership
//     changes that cannot change the membership;
//   - now and then another token than the client's own: malformed, unknown,
//     empty, JWT-shaped garbage, one whose raft index is far ahead (sent
//     with a short deadline: etcd waits for that index), its own token with
//     "Bearer " or under metadata key "authorization".
//
// Both members restart halfway, which drops every simple token. Each seed
// runs with simple tokens and again with JWTs (authJWTArgs).
//
// A client holds one token per server. It authenticates before a request
// when it holds none and auth is on, and like clientv3 it authenticates
// again and retries once when a request fails with "invalid auth token" or
// "revision of auth store is old"; every one of these requests goes to both
// servers and is compared too.
//
// A difference that authKnownDiff recognises is a reported one kvd has not
// fixed yet: KVD_E2E_AUTH_DIFF_KNOWN=ignore counts them instead of failing,
// to look for others. KVD_E2E_SERVER=etcd runs etcd against itself: the
// digest each seed logs is the same on every run.
func TestAuthDifferential(t *testing.T) {
	t.Parallel()
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
	// By default the JWT pass runs the first seed only, for CI's time.
	jwtSeeds := seeds
	if os.Getenv(authDiffSeedsEnv) == "" {
		jwtSeeds = seeds[:1]
	}
	tokens := []string{"simple", "jwt"}
	if s := os.Getenv(authDiffTokensEnv); s != "" {
		tokens = strings.Split(s, ",")
	}
	for _, engine := range harness.Engines() {
		for _, tok := range tokens {
			name, seeds := engine, seeds
			var args []string
			switch tok = strings.TrimSpace(tok); tok {
			case "simple":
			case "jwt":
				name += "/jwt"
				seeds = jwtSeeds
				args = authJWTArgs(t)
			default:
				t.Fatalf("%s=%q: simple or jwt", authDiffTokensEnv, tok)
			}
			for _, seed := range seeds {
				t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
					runAuthDifferential(t, engine, seed, nops, args)
				})
			}
		}
	}
}

// authJWTArgs are the flags that make both servers sign JWTs with one
// ES256 key, written under t.TempDir(). With JWTs a token outlives a
// restart, and any auth change makes every token older than the auth
// store: the next key request fails with "revision of auth store is old"
// and the client logs in again.
func authJWTArgs(t *testing.T) []string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	mustOK(t, "JWT key", err)
	der, err := x509.MarshalECPrivateKey(key)
	mustOK(t, "JWT key", err)
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	mustOK(t, "JWT public key", err)
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	mustOK(t, "write JWT key", os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600))
	mustOK(t, "write JWT public key", os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644))
	return []string{"--auth-token", "jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=ES256,ttl=10m"}
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
	verbose    bool // log every request and both answers
	jwt        bool // the servers use JWTs
	// label, when set, names the fixed case being run (instead of a seed
	// and op), and every difference is reported without stopping.
	label  string
	counts map[string]int
	digest hash.Hash
}

// runAuthDifferential runs one seed; args, when given, are authJWTArgs.
func runAuthDifferential(t *testing.T, engine string, seed uint64, nops int, args []string) {
	r := newAuthRun(t, engine, seed, args)
	r.jwt = args != nil
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
// from fresh stores, with authServerArgs and args, and connects the clients
// to both.
func newAuthRun(t *testing.T, engine string, seed uint64, args []string) *authRun {
	args = append(append([]string(nil), authServerArgs...), args...)
	ref := harness.StartEtcd(t, harness.Options{Args: args})
	sut := harness.StartKVD(t, harness.Options{Engine: engine, Args: args})
	r := &authRun{
		t:       t,
		seed:    seed,
		procs:   [2]*harness.Process{ref, sut},
		gen:     newAuthGen(&opGen{rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)), rev: 1}),
		op:      -1,
		counts:  map[string]int{},
		digest:  sha256.New(),
		verbose: envSet(authDiffVerboseEnv),
	}
	var ids [2]uint64
	for side, p := range r.procs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s := dialAuthStubs(t, p)
		m, err := s.cluster.MemberList(ctx, &pb.MemberListRequest{}, waitForReady)
		cancel()
		if err != nil || len(m.Members) != 1 {
			t.Fatalf("%s: member list: %v %v", p.Label(), m, err)
		}
		ids[side] = m.Members[0].ID
	}
	for _, name := range authClientNames {
		c := &authClient{name: name}
		for side, p := range r.procs {
			c.stubs[side] = dialAuthStubs(t, p)
			c.stubs[side].memberID = ids[side]
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
// An action with a fixed token sends that token and nothing else.
func (r *authRun) exec(a authAction) {
	c := r.clients[a.client]
	if _, ok := a.req.(*pb.AuthenticateRequest); ok {
		r.authenticate(c, a, false)
		return
	}
	own := a.tok != authTokenFixed && c.name != ""
	login := func() bool {
		return r.authenticate(c, authAction{client: a.client, req: r.gen.authenticate(c.name)}, true)
	}
	if own && c.tokens[0] == "" && r.gen.enabled {
		login()
	}
	resp, err := r.step(c, a)
	if own && needsReauth(err) && login() {
		resp, err = r.step(c, a)
	}
	r.gen.observe(a.req, resp, err)
}

// authenticate sends the login a (an AuthenticateRequest) of c to both
// servers and keeps each server's new token. Like clientv3, which attaches
// its token to every call, c still sends the token it holds with the
// login. When that token is known to be bad (drop), a failed login leaves c
// with none; otherwise c keeps it. It reports whether the reference
// accepted the login.
func (r *authRun) authenticate(c *authClient, a authAction, drop bool) bool {
	ref, sut := r.send(c, a)
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
	resp    proto.Message
	more    []proto.Message // for a watch: the responses after the create response
	moreErr error           // for a watch: the error that ended them, if any
	err     error
	took    time.Duration
}

// step sends a from c to both servers and returns the reference's answer.
func (r *authRun) step(c *authClient, a authAction) (proto.Message, error) {
	ref, _ := r.send(c, a)
	return ref.resp, ref.err
}

// send sends a from c to both servers at once, each with the token a
// carries for it, and compares the answers.
func (r *authRun) send(c *authClient, a authAction) (ref, sut authResult) {
	t := r.t
	t.Helper()
	req := a.req
	r.requests++
	timeout := 30 * time.Second
	if a.short() {
		timeout = authShortDeadline
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	do := func(side int) authResult {
		sctx := ctx
		if key, value, ok := a.tokenFor(c.tokens[side]); ok {
			sctx = metadata.AppendToOutgoingContext(ctx, key, value)
		}
		start := time.Now()
		res := authDo(sctx, c.stubs[side], a)
		res.took = time.Since(start)
		return timedOut(res, a)
	}
	sutc := make(chan authResult, 1)
	go func() { sutc <- do(1) }()
	ref = do(0)
	sut = <-sutc
	where := fmt.Sprintf("seed %d op %d (request %d)", r.seed, r.op, r.requests)
	if r.label != "" {
		where = fmt.Sprintf("case %q (request %d)", r.label, r.requests)
	}
	what := fmt.Sprintf("%s as %s, %s: %v%s", a.kind(), c, a.describeToken(c.tokens[0]), req, a.extra())

	// A server that did not answer may be on its way out: give it the
	// time to exit, so that a crash is reported as one. A request sent
	// with a short deadline is expected not to be answered.
	for side, res := range [2]authResult{ref, sut} {
		if noAnswer(res.err) && !a.short() {
			r.procs[side].WaitExit(5 * time.Second)
		}
	}
	// etcd v3.7.3 panics on some requests (Txn shapes among them); that
	// is the reference failing, which says nothing of the server under test.
	if exited, how := r.procs[0].Exited(); exited {
		t.Fatalf("%s: the reference crashed (etcd exited: %v) on %s\netcd's answer: %s\n%s's answer: %s\n(this says nothing about %s; the sequence cannot go on without a reference)",
			where, how, what, fmtAuthRes(ref), r.procs[1].Label(), fmtAuthRes(sut), r.procs[1].Label())
	}
	if exited, how := r.procs[1].Exited(); exited {
		t.Fatalf("%s: %s exited (%v) on %s\netcd: %s\n%s: %s",
			where, r.procs[1].Label(), how, what, fmtAuthRes(ref), r.procs[1].Label(), fmtAuthRes(sut))
	}
	// A timed-out request on both sides would compare equal and prove
	// nothing, unless it was meant to time out.
	for _, e := range []error{ref.err, sut.err, ref.moreErr, sut.moreErr} {
		if noAnswer(e) && !a.short() {
			t.Fatalf("%s: %s: no answer: %v (etcd: %s; %s: %s)",
				where, what, e, fmtAuthRes(ref), r.procs[1].Label(), fmtAuthRes(sut))
		}
	}
	why := diffAuthResults(ref, sut)
	if r.verbose {
		t.Logf("%s: %s\netcd: %s\n%s: %s", where, what, fmtAuthRes(ref), r.procs[1].Label(), fmtAuthRes(sut))
	}
	if known := authKnownDiff(a, r.jwt, ref, sut); why != "" && known != "" {
		if os.Getenv(authKnownEnv) == "ignore" {
			r.counts["known difference: "+known]++
			why = ""
		} else {
			why += "; the known difference: " + known
		}
	}
	if why != "" {
		r.mismatches++
		report := t.Errorf
		// After a request that may have changed state differently on the
		// two sides (a store, an auth store, a client's token), later
		// differences say nothing new.
		if (!authReadOnly(req) && !(ref.err != nil && sut.err != nil) || r.mismatches >= maxDiffMismatches) && r.label == "" {
			report = t.Fatalf
		}
		report("%s: responses differ (%s)\nrequest: %s\netcd: %s\n%s: %s",
			where, why, what, fmtAuthRes(ref), r.procs[1].Label(), fmtAuthRes(sut))
	}

	kind := a.kind()
	r.counts[kind]++
	for _, f := range authFeatures(req) {
		r.counts[f]++
	}
	if a.tok != authTokenOwn {
		r.counts[fmt.Sprintf("token %s", a.describeToken(c.tokens[0]))]++
	}
	if ref.err != nil {
		_, msg := errCodeMsg(ref.err)
		r.counts[kind+" error "+msg]++
	} else if w, ok := ref.resp.(*pb.WatchResponse); ok && w.Canceled {
		r.counts[kind+" canceled "+w.CancelReason]++
	}
	// The digest covers the requests and the reference's answers: two runs
	// of one seed must print the same one.
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	fmt.Fprintf(r.digest, "%t %s %s %d %q %x %s|", c.tokens[0] != "", c, kind, a.tok, a.fixed, b, a.extra())
	if ref.err != nil {
		code, msg := errCodeMsg(ref.err)
		fmt.Fprintf(r.digest, "error %v %s|", code, msg)
	} else {
		for _, m := range append([]proto.Message{ref.resp}, ref.more...) {
			m = proto.Clone(normAuthResp(m, true))
			zeroMemberFields(m.ProtoReflect())
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			fmt.Fprintf(r.digest, "%x|", b)
		}
		if ref.moreErr != nil {
			code, msg := errCodeMsg(ref.moreErr)
			fmt.Fprintf(r.digest, "then error %v %s|", code, msg)
		}
	}
	return ref, sut
}

// diffAuthResults returns "" when two answers are the same once reduced to
// what etcd's semantics fix (normAuthResp), or what differs.
func diffAuthResults(ref, sut authResult) string {
	norm := func(m proto.Message) proto.Message {
		if m == nil {
			return nil
		}
		return proto.Clone(normAuthResp(m, false))
	}
	rr, sr := norm(ref.resp), norm(sut.resp)
	alignTTL(rr, sr)
	if why := diffResults(rr, ref.err, sr, sut.err); why != "" || ref.err != nil {
		return why
	}
	if len(ref.more) != len(sut.more) {
		return fmt.Sprintf("%d responses after the first from etcd, %d from the server under test", len(ref.more), len(sut.more))
	}
	for i := range ref.more {
		if why := diffResults(norm(ref.more[i]), nil, norm(sut.more[i]), nil); why != "" {
			return fmt.Sprintf("response %d after the first: %s", i+1, why)
		}
	}
	if (ref.moreErr == nil) != (sut.moreErr == nil) {
		return "only one stream failed after the first response"
	}
	if ref.moreErr != nil {
		return diffResults(nil, ref.moreErr, nil, sut.moreErr)
	}
	return ""
}
