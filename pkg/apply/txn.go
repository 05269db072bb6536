package apply

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Compare evaluates one txn compare against r, as etcd does: a VALUE compare
// on a missing key is false; other targets compare a missing key as zero; a
// range compare holds only if it holds for every key.
func Compare(r mvcc.Reader, c *pb.Compare) bool {
	switch c.Target {
	case pb.Compare_CREATE, pb.Compare_MOD, pb.Compare_VERSION:
		return compareVersions(r, c)
	}
	rr, err := r.Range(c.Key, RangeEnd(c.RangeEnd), mvcc.RangeOptions{})
	if err != nil {
		return false
	}
	if len(rr.KVs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false
		}
		return compareKV(c, &mvccpb.KeyValue{})
	}
	for i := range rr.KVs {
		if !compareKV(c, &rr.KVs[i]) {
			return false
		}
	}
	return true
}

// compareVersions is Compare for the targets the index holds (create and mod
// revision, version): no value is read, which on Badger was a tenth of a
// compare-and-put txn's CPU.
func compareVersions(r mvcc.Reader, c *pb.Compare) bool {
	ok, found := true, false
	r.Versions(c.Key, RangeEnd(c.RangeEnd), func(created, modified, version int64) bool {
		found = true
		ok = compareKV(c, &mvccpb.KeyValue{CreateRevision: created, ModRevision: modified, Version: version})
		return ok
	})
	if !found {
		return compareKV(c, &mvccpb.KeyValue{})
	}
	return ok
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var result int
	switch c.Target {
	case pb.Compare_VALUE:
		result = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		result = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		result = cmpInt(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		result = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		result = cmpInt(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return result == 0
	case pb.Compare_NOT_EQUAL:
		return result != 0
	case pb.Compare_GREATER:
		return result > 0
	case pb.Compare_LESS:
		return result < 0
	}
	return true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// txnPath decides, before anything is written, which branch every txn and
// nested txn takes: all compares see the state before the txn, as in etcd.
func txnPath(r mvcc.Reader, rt *pb.TxnRequest) []bool {
	ok := true
	for _, c := range rt.Compare {
		if !Compare(r, c) {
			ok = false
			break
		}
	}
	path := []bool{ok}
	for _, op := range branch(rt, ok) {
		if t := op.GetRequestTxn(); t != nil {
			path = append(path, txnPath(r, t)...)
		}
	}
	return path
}

func branch(rt *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return rt.Success
	}
	return rt.Failure
}

// precheck walks the chosen path in execution order and finds every error
// that would otherwise surface halfway through the writes, so a failing txn
// changes nothing. It tracks the txn's own puts and deletes: etcd v3.7.3
// checks ignore_value/ignore_lease puts against the state before the txn, so
// a txn that first deletes a from-key range and then puts an existing key with
// ignore_value passes its check and panics the apply loop. kvd answers
// "key not found" instead.
type precheck struct {
	r           mvcc.Reader
	compactRev  int64
	leaseExists func(int64) bool
	seq         int
	puts        map[string]int
	dels        []seqRange
}

type seqRange struct {
	key, end []byte
	seq      int
}

func (p *precheck) txn(rt *pb.TxnRequest, path []bool) ([]bool, error) {
	ok := path[0]
	path = path[1:]
	for _, op := range branch(rt, ok) {
		var err error
		switch {
		case op.GetRequestRange() != nil:
			err = p.rangeReq(op.GetRequestRange())
		case op.GetRequestPut() != nil:
			err = p.put(op.GetRequestPut())
		case op.GetRequestDeleteRange() != nil:
			d := op.GetRequestDeleteRange()
			p.seq++
			p.dels = append(p.dels, seqRange{d.Key, RangeEnd(d.RangeEnd), p.seq})
		case op.GetRequestTxn() != nil:
			path, err = p.txn(op.GetRequestTxn(), path)
		}
		if err != nil {
			return nil, err
		}
	}
	return path, nil
}

func (p *precheck) rangeReq(req *pb.RangeRequest) error {
	switch {
	case req.Revision == 0:
		return nil
	case req.Revision > p.r.Rev():
		return rpctypes.ErrGRPCFutureRev
	case req.Revision < p.compactRev:
		return rpctypes.ErrGRPCCompacted
	}
	return nil
}

func (p *precheck) put(req *pb.PutRequest) error {
	if err := p.checkPut(req); err != nil {
		return err
	}
	p.seq++
	if p.puts == nil {
		p.puts = make(map[string]int)
	}
	p.puts[string(req.Key)] = p.seq
	return nil
}

// checkPut is put's check without recording the put for the txn's later
// operations: all a lone Put needs.
func (p *precheck) checkPut(req *pb.PutRequest) error {
	// A missing lease is found before a missing key, as etcd's apply does.
	if req.Lease != 0 && (p.leaseExists == nil || !p.leaseExists(req.Lease)) {
		return rpctypes.ErrGRPCLeaseNotFound
	}
	if req.IgnoreValue || req.IgnoreLease {
		exists, err := p.exists(req.Key)
		if err != nil {
			return err
		}
		if !exists {
			return rpctypes.ErrGRPCKeyNotFound
		}
	}
	return nil
}

// exists tells whether an ignore_value/ignore_lease put of key passes. etcd
// checks such puts against the state before the txn, so a key the txn itself
// put first is still missing ("key not found"). A key that existed but that
// the txn deleted (and did not put again) before this point passes etcd's
// check and panics its apply; kvd finds it missing.
func (p *precheck) exists(key []byte) (bool, error) {
	rr, err := p.r.Range(key, nil, mvcc.RangeOptions{})
	if err != nil {
		return false, ToGRPC(err)
	}
	if len(rr.KVs) == 0 {
		return false, nil
	}
	putSeq := p.puts[string(key)]
	delSeq := 0
	for _, d := range p.dels {
		if d.seq > delSeq && inRange(key, d.key, d.end) {
			delSeq = d.seq
		}
	}
	return delSeq == 0 || putSeq > delSeq, nil
}

func inRange(k, key, end []byte) bool {
	switch {
	case end == nil:
		return bytes.Equal(k, key)
	case len(end) == 1 && end[0] == 0:
		return bytes.Compare(k, key) >= 0
	}
	return bytes.Compare(k, key) >= 0 && bytes.Compare(k, end) < 0
}

// txnWriter is what a txn executes against: a write txn, or a read view for
// read-only txns (readOnly).
type txnWriter interface {
	mvcc.Reader
	Put(key, value []byte, lease int64) int64
	DeleteRange(key, end []byte) (n, rev int64)
}

// readOnly runs txns without writes against a read view.
type readOnly struct{ mvcc.Reader }

func (readOnly) Put([]byte, []byte, int64) int64           { panic("apply: put in a read-only txn") }
func (readOnly) DeleteRange([]byte, []byte) (int64, int64) { panic("apply: delete in a read-only txn") }

// ReadOnlyTxn answers a txn that has no puts or deletes from r, as the
// serializable or read-index path does.
func ReadOnlyTxn(r mvcc.Reader, compactRev int64, rt *pb.TxnRequest) (*pb.TxnResponse, error) {
	path := txnPath(r, rt)
	p := &precheck{r: r, compactRev: compactRev}
	if _, err := p.txn(rt, path); err != nil {
		return nil, err
	}
	resp, _, err := execTxn(readOnly{r}, rt, path, &txnState{})
	if err != nil {
		return nil, err
	}
	resp.Header.Revision = r.Rev()
	return resp, nil
}

// IsReadOnlyTxn tells whether rt holds only ranges (etcd sends a txn with
// nested txns through raft even when they only read).
func IsReadOnlyTxn(rt *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{rt.Success, rt.Failure} {
		for _, op := range ops {
			if op.GetRequestRange() == nil {
				return false
			}
		}
	}
	return true
}

// IsSerializableTxn tells whether rt holds only serializable ranges.
func IsSerializableTxn(rt *pb.TxnRequest) bool {
	for _, ops := range [][]*pb.RequestOp{rt.Success, rt.Failure} {
		for _, op := range ops {
			if r := op.GetRequestRange(); r == nil || !r.Serializable {
				return false
			}
		}
	}
	return true
}

// execTxn runs the chosen path inside one write txn.
func execTxn(t txnWriter, rt *pb.TxnRequest, path []bool, st *txnState) (*pb.TxnResponse, []bool, error) {
	ok := path[0]
	path = path[1:]
	ops := branch(rt, ok)
	resp := &pb.TxnResponse{Header: &pb.ResponseHeader{}, Succeeded: ok, Responses: make([]*pb.ResponseOp, len(ops))}
	for i, op := range ops {
		switch {
		case op.GetRequestRange() != nil:
			rr, err := Range(t, op.GetRequestRange())
			if err != nil {
				return nil, nil, ToGRPC(err)
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}
		case op.GetRequestPut() != nil:
			pr, err := put(t, op.GetRequestPut(), st)
			if err != nil {
				return nil, nil, err
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}}
		case op.GetRequestDeleteRange() != nil:
			dr, err := deleteRange(t, op.GetRequestDeleteRange(), st)
			if err != nil {
				return nil, nil, err
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}}
		case op.GetRequestTxn() != nil:
			var (
				tr  *pb.TxnResponse
				err error
			)
			tr, path, err = execTxn(t, op.GetRequestTxn(), path, st)
			if err != nil {
				return nil, nil, err
			}
			resp.Responses[i] = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}}
		}
	}
	return resp, path, nil
}

// txnState follows one write txn: whether it wrote, and so which revision
// its responses carry.
type txnState struct {
	wrote bool
	rev   int64
}

func put(t txnWriter, p *pb.PutRequest, st *txnState) (*pb.PutResponse, error) {
	resp := &pb.PutResponse{Header: &pb.ResponseHeader{}}
	val, lease := p.Value, p.Lease
	if p.IgnoreValue || p.IgnoreLease || p.PrevKv {
		rr, err := t.Range(p.Key, nil, mvcc.RangeOptions{})
		if err != nil {
			return nil, ToGRPC(err)
		}
		var prev *mvccpb.KeyValue
		if len(rr.KVs) == 1 {
			prev = &rr.KVs[0]
		}
		if (p.IgnoreValue || p.IgnoreLease) && prev == nil {
			return nil, rpctypes.ErrGRPCKeyNotFound
		}
		if p.IgnoreValue {
			val = prev.Value
		}
		if p.IgnoreLease {
			lease = prev.Lease
		}
		if p.PrevKv {
			resp.PrevKv = prev
		}
	}
	resp.Header.Revision = t.Put(p.Key, val, lease)
	st.wrote, st.rev = true, resp.Header.Revision
	return resp, nil
}

func deleteRange(t txnWriter, d *pb.DeleteRangeRequest, st *txnState) (*pb.DeleteRangeResponse, error) {
	resp := &pb.DeleteRangeResponse{Header: &pb.ResponseHeader{}}
	end := RangeEnd(d.RangeEnd)
	if d.PrevKv {
		rr, err := t.Range(d.Key, end, mvcc.RangeOptions{})
		if err != nil {
			return nil, ToGRPC(err)
		}
		resp.PrevKvs = kvPointers(rr, new([1]*mvccpb.KeyValue))
	}
	n, rev := t.DeleteRange(d.Key, end)
	resp.Deleted, resp.Header.Revision = n, rev
	if n > 0 {
		st.wrote, st.rev = true, rev
	}
	return resp, nil
}
