package api

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/watchhub"
)

// watchServer is the Watch service: one gRPC stream multiplexes a client's
// watchers on one watchhub.Stream. A receiving goroutine turns requests into
// hub messages; the handler's goroutine sends the hub's responses, and the
// periodic progress notifications, etcd's recvLoop and sendLoop.
type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

// maxPendingCreates bounds the create requests of one stream waiting for
// the hub's answer (etcd's control channel holds 16).
const maxPendingCreates = 64

// watchOpts are what the sending side must know of a created watcher.
type watchOpts struct {
	progress, fragment bool
}

func (w *watchServer) Watch(stream pb.Watch_WatchServer) error {
	hub := w.s.WatchHub
	ws := hub.NewStream()
	defer ws.Close()

	// creates are the options of create requests not answered yet, in
	// order: the hub answers each create with one Created response, in the
	// order it got them.
	var (
		mu      sync.Mutex
		creates []watchOpts
	)
	// slots bounds the create requests the hub has not answered, and so
	// what a client that sends creates but reads nothing makes the hub hold.
	slots := make(chan struct{}, maxPendingCreates)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				// A client that half-closes keeps its watchers until it
				// goes away, as etcd's recvLoop (the JSON gateway closes
				// its send side once the request body is read).
				if !errors.Is(err, io.EOF) {
					recvErr <- err
				}
				return
			}
			switch u := req.RequestUnion.(type) {
			case *pb.WatchRequest_CreateRequest:
				if u.CreateRequest == nil {
					continue
				}
				r := watchRequest(u.CreateRequest)
				// Refused in order with the stream's other creates. A
				// negative start revision is refused as compacted first
				// (by the hub), as etcd does.
				if u.CreateRequest.StartRevision >= 0 {
					if err := w.s.watchPermitted(stream.Context(), u.CreateRequest); err != nil {
						r.Refuse = watchRefusal(err)
					}
				}
				select {
				case slots <- struct{}{}:
				case <-stream.Context().Done():
					recvErr <- stream.Context().Err()
					return
				}
				mu.Lock()
				creates = append(creates, watchOpts{progress: u.CreateRequest.ProgressNotify, fragment: u.CreateRequest.Fragment})
				mu.Unlock()
				ws.Watch(r)
			case *pb.WatchRequest_CancelRequest:
				if u.CancelRequest != nil {
					ws.Cancel(u.CancelRequest.WatchId)
				}
			case *pb.WatchRequest_ProgressRequest:
				if u.ProgressRequest != nil {
					ws.RequestProgress()
				}
			}
		}
	}()

	// progress and fragment are per watcher; owned by this goroutine.
	// progress[id] is true when no events went to id since the last tick.
	progress := map[int64]bool{}
	fragment := map[int64]bool{}
	tick := time.NewTicker(hub.ProgressInterval())
	defer tick.Stop()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return watchCtxErr(ctx.Err())
		case err := <-recvErr:
			if err != nil {
				return watchCtxErr(err)
			}
			return nil
		case <-tick.C:
			for id, quiet := range progress {
				if quiet {
					ws.Progress(id)
				}
				progress[id] = true
			}
		case r := <-ws.C():
			ws.Ack()
			if r.Created {
				// Invariant: one Created response per create request sent.
				mu.Lock()
				var o watchOpts
				if len(creates) > 0 {
					o = creates[0]
					creates = creates[1:]
				}
				mu.Unlock()
				select {
				case <-slots:
				default:
				}
				if !r.Canceled {
					if o.progress {
						progress[r.WatchID] = true
					}
					if o.fragment {
						fragment[r.WatchID] = true
					}
				}
			}
			wr := &pb.WatchResponse{
				Header:          w.s.header(r.Revision),
				WatchId:         r.WatchID,
				Created:         r.Created,
				Canceled:        r.Canceled,
				CompactRevision: r.CompactRevision,
				CancelReason:    r.CancelReason,
				Events:          r.Events,
			}
			var err error
			if fragment[r.WatchID] {
				err = sendFragments(wr, w.s.cfg.MaxRequestBytes, stream.Send)
			} else {
				err = stream.Send(wr)
			}
			if err != nil {
				return watchCtxErr(err)
			}
			if r.Canceled {
				delete(progress, r.WatchID)
				delete(fragment, r.WatchID)
			} else if len(r.Events) > 0 {
				if _, ok := progress[r.WatchID]; ok {
					progress[r.WatchID] = false
				}
			}
		}
	}
}

// watchRequest maps a create request to the hub's, with etcd's conventions:
// no key means from the smallest key, a range end of "\x00" means every key
// from key on.
func watchRequest(c *pb.WatchCreateRequest) watchhub.WatchRequest {
	r := watchhub.WatchRequest{ID: c.WatchId, Key: c.Key, StartRev: c.StartRevision, PrevKV: c.PrevKv}
	if len(r.Key) == 0 {
		r.Key = []byte{0}
	}
	switch {
	case len(c.RangeEnd) == 1 && c.RangeEnd[0] == 0:
		r.End = []byte{}
	case len(c.RangeEnd) > 0:
		r.End = c.RangeEnd
	}
	for _, f := range c.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			r.NoPut = true
		case pb.WatchCreateRequest_NODELETE:
			r.NoDelete = true
		}
	}
	return r
}

// watchCtxErr maps a stream ending because the client went away to etcd's
// error.
func watchCtxErr(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
		return rpctypes.ErrGRPCWatchCanceled
	}
	return err
}

// sendFragments sends wr, split into responses of at most maxBytes (but at
// least one event each) when it is larger; all but the last have Fragment
// set, and clientv3 joins them. A response of one event is never split.
func sendFragments(wr *pb.WatchResponse, maxBytes int, send func(*pb.WatchResponse) error) error {
	if proto.Size(wr) < maxBytes || len(wr.Events) < 2 {
		return send(wr)
	}
	evs := wr.Events
	for len(evs) > 0 {
		cur := &pb.WatchResponse{
			Header:          wr.Header,
			WatchId:         wr.WatchId,
			Created:         wr.Created,
			Canceled:        wr.Canceled,
			CompactRevision: wr.CompactRevision,
			CancelReason:    wr.CancelReason,
			Fragment:        true,
			Events:          make([]*mvccpb.Event, 0, 8),
		}
		// Sizes add up: each event is one length-delimited field 11.
		size := proto.Size(cur)
		n := 0
		for _, ev := range evs {
			es := proto.Size(ev)
			size += 1 + protowire.SizeVarint(uint64(es)) + es
			if n > 0 && size >= maxBytes {
				break
			}
			cur.Events = append(cur.Events, ev)
			n++
		}
		evs = evs[n:]
		cur.Fragment = len(evs) > 0
		if err := send(cur); err != nil {
			return err
		}
	}
	return nil
}
