package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// handleMembers answers a member that joins: the cluster's member list as
// Config.Members encodes it. It needs no cluster ID: the joiner learns it
// from the answer.
func (t *Transport) handleMembers() ([]byte, error) {
	if t.cfg.Members == nil {
		return nil, status.Errorf(codes.Unavailable, "transport: member %x does not share its member list", t.cfg.ID)
	}
	b, err := t.cfg.Members()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "transport: member list of %x: %v", t.cfg.ID, err)
	}
	return b, nil
}

const fetchAttemptTimeout = 3 * time.Second

// FetchMembers asks the members at peerURLs, in turn, for their member list
// (what their Config.Members returns) and returns the first answer. https
// URLs are dialed with tlsCreds (the system roots when nil).
func FetchMembers(ctx context.Context, peerURLs []string, tlsCreds credentials.TransportCredentials, opts ...grpc.DialOption) ([]byte, error) {
	targets, err := parseURLs(peerURLs)
	if err != nil {
		return nil, fmt.Errorf("fetch members: %w", err)
	}
	dopts := dialOptions{tls: tlsCreds, opts: opts}
	var errs []error
	for i, target := range targets {
		// One silent peer must not use up the caller's whole wait.
		actx, cancel := context.WithTimeout(ctx, fetchAttemptTimeout)
		b, err := fetchMembers(actx, target, dopts)
		cancel()
		if err == nil {
			return b, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", peerURLs[i], err))
	}
	return nil, fmt.Errorf("fetch members: %w", errors.Join(errs...))
}

func fetchMembers(ctx context.Context, target target, opts dialOptions) ([]byte, error) {
	cc, err := target.dial(opts)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	req, resp := []byte{}, []byte{}
	if err := cc.Invoke(ctx, membersMethod, &req, &resp, grpc.CallContentSubtype(codecName), grpc.WaitForReady(false)); err != nil {
		return nil, err
	}
	return resp, nil
}
