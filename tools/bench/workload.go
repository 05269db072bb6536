package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// requestFunc issues one request over kv's connection. seq numbers the
// requests of a phase from 0. A requestFunc belongs to one client loop and
// is never called concurrently, so it may reuse its request message between
// calls: gRPC has marshalled the message by the time the call returns.
type requestFunc func(ctx context.Context, kv client, seq int64) error

// client is the stubs of one connection: KV and, for the auth workload, Auth.
type client struct {
	pb.KVClient
	auth pb.AuthClient
}

// A workload is one benchmark command's requests.
type workload interface {
	// prepare runs once, before warm-up and measurement, with one client
	// per connection; it writes whatever the requests need to find.
	prepare(ctx context.Context, kvs []pb.KVClient, clients int) error
	// newLoop is called once per client loop.
	newLoop() requestFunc
}

// keyOptions choose the keys that put and txn write.
type keyOptions struct {
	keySize    int
	valSize    int
	keySpace   int
	sequential bool
	prefix     string // --key-prefix, before the keySize digits
}

func (o keyOptions) validate() error {
	if o.keySpace < 1 {
		return fmt.Errorf("--key-space-size must be at least 1, got %d", o.keySpace)
	}
	if d := digits(o.keySpace - 1); o.keySize < d {
		return fmt.Errorf("--key-size %d is too small to number %d keys (needs %d)", o.keySize, o.keySpace, d)
	}
	if o.valSize < 0 {
		return fmt.Errorf("--val-size must not be negative, got %d", o.valSize)
	}
	return nil
}

// keyIndex picks the key of request seq: the next one in order with
// --sequential-keys, a uniformly random one otherwise.
func (o keyOptions) keyIndex(seq int64) int {
	if o.sequential {
		return int(seq % int64(o.keySpace))
	}
	return mrand.IntN(o.keySpace)
}

// digits is the number of decimal digits of n >= 0.
func digits(n int) int {
	return len(strconv.Itoa(n))
}

// fillKey writes n into dst as a zero-padded decimal filling all of dst, so
// keys are readable, fixed-size and sort in numeric order. n must fit.
func fillKey(dst []byte, n int) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = byte('0' + n%10)
		n /= 10
	}
}

// newKey is a key of o's shape: the prefix, then keySize digits, which
// fillKey writes into the returned digits slice.
func (o keyOptions) newKey() (key, digits []byte) {
	key = make([]byte, len(o.prefix)+o.keySize)
	copy(key, o.prefix)
	return key, key[len(o.prefix):]
}

// randomValue returns size random bytes, shared read-only by every request.
func randomValue(size int) []byte {
	v := make([]byte, size)
	_, _ = rand.Read(v) // crypto/rand.Read never fails on supported platforms.
	return v
}

type putWorkload struct {
	keyOptions
	value []byte
}

func newPutWorkload(o keyOptions) (*putWorkload, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &putWorkload{keyOptions: o, value: randomValue(o.valSize)}, nil
}

func (w *putWorkload) prepare(context.Context, []pb.KVClient, int) error { return nil }

func (w *putWorkload) newLoop() requestFunc {
	key, num := w.newKey()
	req := &pb.PutRequest{Key: key, Value: w.value}
	return func(ctx context.Context, kv client, seq int64) error {
		fillKey(num, w.keyIndex(seq))
		_, err := kv.Put(ctx, req)
		return err
	}
}

type rangeWorkload struct {
	key          string // exactly one of key and prefix is set
	prefix       string
	serializable bool
	limit        int64
	preload      int
	valSize      int
}

func (w *rangeWorkload) validate() error {
	if (w.key == "") == (w.prefix == "") {
		return errors.New("range needs exactly one of --key and --prefix")
	}
	if w.preload < 0 || w.limit < 0 || w.valSize < 0 {
		return errors.New("--preload, --limit and --val-size must not be negative")
	}
	return nil
}

// preloadKey names the i-th of n keys written under the prefix.
func preloadKey(prefix string, i, n int) []byte {
	k := make([]byte, len(prefix)+digits(n-1))
	copy(k, prefix)
	fillKey(k[len(prefix):], i)
	return k
}

// prefixEnd is the range end that selects every key starting with prefix.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	// All 0xff: no key is greater, so range to the end of the keyspace.
	return []byte{0}
}

func (w *rangeWorkload) request() *pb.RangeRequest {
	req := &pb.RangeRequest{Key: []byte(w.key), Limit: w.limit, Serializable: w.serializable}
	if w.prefix != "" {
		req.Key, req.RangeEnd = []byte(w.prefix), prefixEnd(w.prefix)
	}
	return req
}

// prepare writes the keys to read and checks a linearizable range finds
// them, so a server that loses writes cannot post fast empty reads.
func (w *rangeWorkload) prepare(ctx context.Context, kvs []pb.KVClient, clients int) error {
	if w.preload == 0 {
		return nil
	}
	value := randomValue(w.valSize)
	want := int64(1)
	if w.key != "" {
		if _, err := kvs[0].Put(ctx, &pb.PutRequest{Key: []byte(w.key), Value: value}); err != nil {
			return fmt.Errorf("preload key %q: %w", w.key, err)
		}
	} else {
		want = int64(w.preload)
		if err := preloadPrefix(ctx, kvs, clients, w.prefix, w.preload, value); err != nil {
			return err
		}
	}
	check := w.request()
	check.Serializable, check.Limit, check.CountOnly = false, 0, true
	resp, err := kvs[0].Range(ctx, check)
	if err != nil {
		return fmt.Errorf("check preload: %w", err)
	}
	if resp.Count < want {
		return fmt.Errorf("check preload: range found %d keys, want at least %d", resp.Count, want)
	}
	return nil
}

// preloadPrefix puts n keys under prefix from up to clients goroutines.
func preloadPrefix(ctx context.Context, kvs []pb.KVClient, clients int, prefix string, n int, value []byte) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := max(1, min(clients, n))
	var wg sync.WaitGroup
	for g := range workers {
		kv := kvs[g%len(kvs)]
		wg.Go(func() {
			for i := g; i < n && ctx.Err() == nil; i += workers {
				key := preloadKey(prefix, i, n)
				if _, err := kv.Put(ctx, &pb.PutRequest{Key: key, Value: value}); err != nil {
					cancel(fmt.Errorf("preload key %q: %w", key, err))
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func (w *rangeWorkload) newLoop() requestFunc {
	req := w.request()
	return func(ctx context.Context, kv client, _ int64) error {
		_, err := kv.Range(ctx, req)
		return err
	}
}

// txnWorkload sends compare-and-put transactions: for each of ops distinct
// keys, compare version > -1 (true for every key, present or not, but the
// server has to look it up) and put the key when all compares hold.
type txnWorkload struct {
	keyOptions
	ops   int
	value []byte
}

func newTxnWorkload(o keyOptions, ops int) (*txnWorkload, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if ops < 1 || ops > o.keySpace {
		return nil, fmt.Errorf("--txn-ops must be between 1 and --key-space-size (%d), got %d", o.keySpace, ops)
	}
	return &txnWorkload{keyOptions: o, ops: ops, value: randomValue(o.valSize)}, nil
}

func (w *txnWorkload) prepare(context.Context, []pb.KVClient, int) error { return nil }

func (w *txnWorkload) newLoop() requestFunc {
	keys := make([][]byte, w.ops)
	nums := make([][]byte, w.ops)
	req := &pb.TxnRequest{
		Compare: make([]*pb.Compare, w.ops),
		Success: make([]*pb.RequestOp, w.ops),
	}
	for j := range keys {
		keys[j], nums[j] = w.newKey()
		req.Compare[j] = &pb.Compare{
			Key:         keys[j],
			Target:      pb.Compare_VERSION,
			Result:      pb.Compare_GREATER,
			TargetUnion: &pb.Compare_Version{Version: -1},
		}
		req.Success[j] = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
			RequestPut: &pb.PutRequest{Key: keys[j], Value: w.value},
		}}
	}
	return func(ctx context.Context, kv client, seq int64) error {
		// Consecutive indexes keep the keys of one txn distinct, which etcd
		// requires of the puts in one txn.
		base := w.keyIndex(seq * int64(w.ops))
		for j, n := range nums {
			fillKey(n, (base+j)%w.keySpace)
		}
		resp, err := kv.Txn(ctx, req)
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("txn on %q: compare version > -1 failed, which must always hold", keys[0])
		}
		return nil
	}
}

// authWorkload logs in: one Authenticate call per request, with --user's
// name and password. It measures the server's password check (bcrypt at
// the cost the user's password was hashed with) and, for simple tokens,
// the raft round that assigns the token. The tokens are not used.
type authWorkload struct {
	user *userCreds
}

func (w *authWorkload) prepare(context.Context, []pb.KVClient, int) error { return nil }

func (w *authWorkload) newLoop() requestFunc {
	req := &pb.AuthenticateRequest{Name: w.user.name, Password: w.user.password}
	return func(ctx context.Context, c client, _ int64) error {
		resp, err := c.auth.Authenticate(ctx, req)
		if err != nil {
			return err
		}
		if resp.Token == "" {
			return errors.New("authenticate: the server returned no token")
		}
		return nil
	}
}
