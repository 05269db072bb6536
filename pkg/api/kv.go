package api

import (
	"bytes"
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/apply"
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
	if !r.Serializable {
		if err := s.linearize(ctx); err != nil {
			return nil, err
		}
	}
	rv := s.Store.Read()
	resp, err := apply.Range(rv, r)
	rv.End()
	if err != nil {
		return nil, mvccErr(err)
	}
	s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	s := k.s
	ctx, span := s.span(ctx, "kv.Put")
	defer span.End()
	if err := checkPut(r); err != nil {
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
	if err := checkTxnTop(r, s.cfg.MaxTxnOps); err != nil {
		return nil, err
	}
	if apply.IsReadOnlyTxn(r) {
		if !apply.IsSerializableTxn(r) {
			if err := s.linearize(ctx); err != nil {
				return nil, err
			}
		}
		rv := s.Store.Read()
		resp, err := apply.ReadOnlyTxn(rv, s.Store.CompactRev(), r)
		rv.End()
		if err != nil {
			return nil, mvccErr(err)
		}
		s.fill(resp.Header)
		return resp, nil
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
	// Pin the revision and the total count with the first view.
	rv := s.Store.Read()
	rev := r.Revision
	if rev == 0 {
		rev = rv.Rev()
	}
	end := apply.RangeEnd(r.RangeEnd)
	total, err := rv.Range(r.Key, end, mvcc.RangeOptions{Rev: rev, Count: true})
	header := s.header(rv.Rev())
	rv.End()
	if err != nil {
		return mvccErr(err)
	}
	count := int64(total.Count)
	if r.CountOnly {
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: &pb.RangeResponse{Header: header, Count: count}})
	}
	key, chunk, sent := r.Key, int64(initialStreamChunk), int64(0)
	for {
		n := chunk
		if r.Limit > 0 {
			n = min(n, r.Limit-sent)
		}
		rv := s.Store.Read()
		rr, err := rv.Range(key, end, mvcc.RangeOptions{Rev: rev, Limit: n})
		rv.End()
		if err != nil {
			return mvccErr(err)
		}
		kvs := make([]*mvccpb.KeyValue, len(rr.KVs))
		for i := range rr.KVs {
			kvs[i] = &rr.KVs[i]
			if r.KeysOnly {
				kvs[i].Value = nil
			}
		}
		sent += int64(len(kvs))
		more := sent < count
		out := &pb.RangeResponse{Kvs: kvs}
		done := !more || len(kvs) == 0 || (r.Limit > 0 && sent >= r.Limit)
		if done {
			out.Header, out.More, out.Count = header, more, count
		}
		if err := stream.Send(&pb.RangeStreamResponse{RangeResponse: out}); err != nil {
			return err
		}
		if done {
			return nil
		}
		key = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
		chunk = nextChunk(chunk, proto.Size(out), s.cfg.MaxRequestBytes)
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
