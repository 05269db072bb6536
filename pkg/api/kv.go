package api

import (
	"bytes"
	"context"
	"math"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

type kvServer struct {
	pb.UnimplementedKVServer
	s *Server
}

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	s := k.s
	ctx, span := s.span(ctx, "kv.Range")
	defer span.End()
	if err := checkRange(r); err != nil {
		return nil, err
	}
	// As etcd, the time of a Range includes its linearizable wait, and
	// the response logged is the one before its header is filled.
	start := time.Now()
	resp, err := s.rangeRead(ctx, r)
	s.slow.ReadOnlyRange(start, r, resp, err)
	if err != nil {
		return nil, err
	}
	s.fill(resp.Header)
	return resp, nil
}

func (s *Server) rangeRead(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if !r.Serializable {
		if err := s.linearize(ctx); err != nil {
			return nil, err
		}
	}
	ctx, err := s.withCaller(ctx)
	if err != nil {
		return nil, err
	}
	checked, err := s.readCheck(ctx, func(who authz.Info) error { return s.Auth.CheckRead(who, r.Key, r.RangeEnd) })
	if err != nil {
		return nil, err
	}
	_, err = s.authorize(ctx, methodRange, rangeAccesses(r))
	if err != nil {
		return nil, err
	}
	rv := s.Store.Read()
	resp, err := apply.Range(rv, r)
	rv.End()
	if err != nil {
		return nil, mvccErr(err)
	}
	if err := s.readStale(checked); err != nil {
		return nil, err
	}
	return resp, nil
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	s := k.s
	ctx, span := s.span(ctx, "kv.Put")
	defer span.End()
	if err := s.checkQuota(ctx, r); err != nil {
		return nil, err
	}
	if err := checkPut(r); err != nil {
		return nil, err
	}
	ctx, err := s.authorize(ctx, methodPut, putAccesses(r))
	if err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, &pb.InternalRaftRequest{Put: r})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := res.Resp.(*pb.PutResponse)
	s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	s := k.s
	ctx, span := s.span(ctx, "kv.DeleteRange")
	defer span.End()
	if err := checkDelete(r); err != nil {
		return nil, err
	}
	ctx, err := s.authorize(ctx, methodDeleteRange, deleteAccesses(r))
	if err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, &pb.InternalRaftRequest{DeleteRange: r})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := res.Resp.(*pb.DeleteRangeResponse)
	s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	s := k.s
	ctx, span := s.span(ctx, "kv.Txn")
	defer span.End()
	if err := s.checkQuota(ctx, r); err != nil {
		return nil, err
	}
	if err := checkTxnTop(r, s.cfg.MaxTxnOps); err != nil {
		return nil, err
	}
	if apply.IsReadOnlyTxn(r) {
		if !apply.IsSerializableTxn(r) {
			if err := s.linearize(ctx); err != nil {
				return nil, err
			}
		}
		// As etcd, the time of a read-only Txn starts after its
		// linearizable wait.
		start := time.Now()
		resp, err := s.readOnlyTxn(ctx, r)
		s.slow.ReadOnlyTxn(start, r, resp, err)
		if err != nil {
			return nil, err
		}
		s.fill(resp.Header)
		return resp, nil
	}
	ctx, err := s.authorize(ctx, methodTxn, txnAccesses(r))
	if err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, &pb.InternalRaftRequest{Txn: r})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp := res.Resp.(*pb.TxnResponse)
	s.fill(resp.Header)
	return resp, nil
}

func (s *Server) readOnlyTxn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	ctx, err := s.withCaller(ctx)
	if err != nil {
		return nil, err
	}
	checked, err := s.readCheck(ctx, func(who authz.Info) error { return apply.CheckTxn(s.Auth, who, r, nil) })
	if err != nil {
		return nil, err
	}
	_, err = s.authorize(ctx, methodTxn, txnAccesses(r))
	if err != nil {
		return nil, err
	}
	rv := s.Store.Read()
	resp, err := apply.ReadOnlyTxn(rv, s.Store.CompactRev(), r)
	rv.End()
	if err != nil {
		return nil, mvccErr(err)
	}
	if err := s.readStale(checked); err != nil {
		return nil, err
	}
	return resp, nil
}

func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	s := k.s
	ctx, span := s.span(ctx, "kv.Compact")
	defer span.End()
	res, err := s.propose(ctx, &pb.InternalRaftRequest{Compaction: r})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	if r.Physical && res.Compacted != nil {
		select {
		case <-res.Compacted:
		case <-s.Store.CompactorDone():
			// The compactor failed or stopped: the compaction will not
			// finish on this run of the member (the next one resumes it).
			select {
			case <-res.Compacted:
			default:
				return nil, rpctypes.ErrGRPCStopped
			}
		case <-ctx.Done():
			return nil, s.raftErr(ctx, ctx.Err())
		}
	}
	resp := res.Resp.(*pb.CompactionResponse)
	s.fill(resp.Header)
	return resp, nil
}

// RangeStream chunks start small and adapt towards targetChunkBytes, as
// etcd's do: the first answer comes quickly and big ranges move in chunks
// near the request size limit.
const initialStreamChunk = 10

// RangeStream serves a range in chunks read at one revision, each from a
// short-lived view, so neither side buffers the whole result.
func (k *kvServer) RangeStream(r *pb.RangeRequest, stream grpc.ServerStreamingServer[pb.RangeStreamResponse]) error {
	s := k.s
	ctx := stream.Context()
	if err := checkRange(r); err != nil {
		return err
	}
	if !(r.SortOrder == pb.RangeRequest_NONE || (r.SortTarget == pb.RangeRequest_KEY && r.SortOrder == pb.RangeRequest_ASCEND)) {
		return status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		return status.Error(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	if !r.Serializable {
		if err := s.linearize(ctx); err != nil {
			return err
		}
	}
	ctx, err := s.withCaller(ctx)
	if err != nil {
		return err
	}
	if _, err := s.readCheck(ctx, func(who authz.Info) error { return s.Auth.CheckRead(who, r.Key, r.RangeEnd) }); err != nil {
		return err
	}
	ctx, err = s.authorize(ctx, methodRangeStream, rangeAccesses(r))
	if err != nil {
		return err
	}
	// Each chunk is a Range of its own (same sort and limit rules, so a
	// non-key sort target orders keys within a chunk, as etcd does), read at
	// the revision the first chunk saw.
	req := proto.Clone(r).(*pb.RangeRequest)
	if r.CountOnly {
		rv := s.Store.Read()
		resp, err := apply.Range(rv, req)
		rv.End()
		if err != nil {
			return mvccErr(err)
		}
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Header: s.header(resp.Header.Revision), Count: resp.Count}})
	}
	total := r.Limit
	if total == 0 {
		total = math.MaxInt64
	}
	req.Limit = min(initialStreamChunk, total)
	var headerRev, count int64
	for {
		rv := s.Store.Read()
		resp, err := apply.Range(rv, req)
		rv.End()
		if err != nil {
			return mvccErr(err)
		}
		if headerRev == 0 {
			headerRev = resp.Header.Revision
			if req.Revision == 0 {
				req.Revision = headerRev
			}
		}
		count += int64(len(resp.Kvs))
		out := &pb.RangeResponse{Kvs: resp.Kvs}
		done := !resp.More || count == total
		var next []byte
		if resp.More {
			next = append(bytes.Clone(resp.Kvs[len(resp.Kvs)-1].Key), 0)
		}
		if done {
			out.Header, out.More, out.Count = s.header(headerRev), resp.More, count
			if resp.More {
				rv := s.Store.Read()
				rest, err := rv.Range(next, apply.RangeEnd(req.RangeEnd), mvcc.RangeOptions{Rev: req.Revision, Count: true})
				rv.End()
				if err != nil {
					return mvccErr(err)
				}
				out.Count += int64(rest.Count)
			}
		}
		if err := stream.Send(&pb.RangeStreamResponse{RangeResponse: out}); err != nil {
			return err
		}
		if done {
			return nil
		}
		req.Key = next
		req.Limit = min(nextChunk(req.Limit, proto.Size(resp), s.cfg.MaxRequestBytes), total-count)
	}
}

// nextChunk doubles or halves the chunk's key count only when the last one
// was outside [target/2, 2*target], so sizes do not thrash near the edge.
func nextChunk(last int64, size, target int) int64 {
	switch {
	case size < target/2:
		last *= 2
	case size > target*2:
		last /= 2
	}
	return max(last, 1)
}

// mvccErr maps mvcc's errors to etcd's wire errors.
func mvccErr(err error) error { return apply.ToGRPC(err) }
