package transport

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// handleHashKV answers a peer's HashKV (the leader's corruption checks, as
// etcd's /members/hashkv on the peer URLs): the request and the answer are
// what Config.HashKV takes and returns. A request from another cluster is
// refused, as etcd's handler refuses another X-Etcd-Cluster-ID.
func (t *Transport) handleHashKV(ctx context.Context, req []byte) ([]byte, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(mdClusterID); len(v) > 0 {
		if cid, err := strconv.ParseUint(v[0], 16, 64); err != nil || cid != t.cfg.ClusterID {
			return nil, status.Errorf(codes.FailedPrecondition, "transport: cluster ID mismatch (%s, this member's is %x)", v[0], t.cfg.ClusterID)
		}
	}
	if t.cfg.HashKV == nil {
		return nil, status.Errorf(codes.Unimplemented, "transport: member %x does not answer HashKV", t.cfg.ID)
	}
	return t.cfg.HashKV(req)
}

// FetchHashKV asks the member at peerURL for its HashKV: req and the answer
// are the peer's Config.HashKV request and answer. clusterID travels along;
// https URLs are dialed with tlsCreds (the system roots when nil).
func FetchHashKV(ctx context.Context, peerURL string, clusterID uint64, tlsCreds credentials.TransportCredentials, req []byte) ([]byte, error) {
	targets, err := parseURLs([]string{peerURL})
	if err != nil {
		return nil, fmt.Errorf("fetch hashkv: %w", err)
	}
	cc, err := targets[0].dial(dialOptions{tls: tlsCreds})
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, mdClusterID, strconv.FormatUint(clusterID, 16))
	var resp []byte
	if err := cc.Invoke(ctx, hashKVMethod, &req, &resp, grpc.CallContentSubtype(codecName), grpc.WaitForReady(false)); err != nil {
		return nil, err
	}
	return resp, nil
}
