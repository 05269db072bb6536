package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/membership"
)

// publishWarnInterval is how often a member that cannot publish itself says
// why in its log (etcd warns once per request timeout); tests shorten it.
var publishWarnInterval = 5 * time.Second

// publisher is the actor that records this member's name and client URLs in
// the member list through raft, once a leader is known, and retries until
// that is done (etcd publishes the same at start). MemberList shows clients
// where to reach each member from it.
type publisher struct {
	c   *config.Config
	api *api.Server
	cl  *membership.Cluster
	lg  *zap.Logger
	// done is closed when Run returns: published, or stopping.
	done chan struct{}
}

// Done is closed once the attributes are published (or the member stops).
func (p *publisher) Done() <-chan struct{} { return p.done }

func (p *publisher) Run(ctx context.Context) error {
	defer close(p.done)
	urls, err := p.c.AdvertiseClientURLsList()
	if err != nil {
		return err
	}
	clientURLs := urlStrings(urls)
	backoff := 100 * time.Millisecond
	lastWarn := time.Now()
	for {
		if m, ok := p.cl.Member(p.cl.Self()); ok && m.Name == p.c.Name && slices.Equal(m.ClientURLs, clientURLs) {
			return nil
		}
		if p.cl.IsRemoved(p.cl.Self()) {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.api.PublishAttributes(pctx, p.c.Name, clientURLs)
		cancel()
		if err == nil {
			p.lg.Info("published member attributes", zap.String("name", p.c.Name), zap.Strings("client-urls", clientURLs))
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(lastWarn) >= publishWarnInterval {
			lastWarn = time.Now()
			// As etcd: a member waiting on a quorum that is not there says
			// so instead of waiting silently.
			p.lg.Warn("failed to publish local member to cluster through raft",
				zap.String("local-member-id", fmt.Sprintf("%x", p.cl.Self())),
				zap.String("name", p.c.Name), zap.Strings("client-urls", clientURLs),
				zap.String("reason", publishReason(p.api.Raft.Leader(), err)),
				zap.Error(err))
		} else {
			p.lg.Debug("publish member attributes", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = nextPublishBackoff(backoff, err)
	}
}

// nextPublishBackoff is the wait before the publish after one that failed
// with err, cur after the previous failure. An applier far behind (a
// snapshot being installed) refuses with too many requests and is caught up
// soon after: keep retrying briskly so the member serves right after, as
// etcd's retry loop does. Other failures back off, up to 2 s.
func nextPublishBackoff(cur time.Duration, err error) time.Duration {
	if errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests) {
		return 100 * time.Millisecond
	}
	return min(2*cur, 2*time.Second)
}

// publishReason says in words why a publish failed: no leader is known, or
// the leader did not commit it in time (no quorum), or the error itself.
func publishReason(leader uint64, err error) string {
	switch {
	case leader == 0:
		return "no leader: waiting for a quorum of members to elect one"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timed out"):
		return fmt.Sprintf("leader %x did not commit the request in time", leader)
	}
	return err.Error()
}
