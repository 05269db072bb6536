package server

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// newAuth opens the member's auth store from the backend, with the token
// provider auth-token names.
func newAuth(lc fx.Lifecycle, c *config.Config, st *mvcc.Store, lg *zap.Logger) (*authz.Store, error) {
	tokens, err := authz.NewTokens(c.AuthToken, time.Duration(c.AuthTokenTTL)*time.Second, lg.Named("auth"))
	if err != nil {
		return nil, fmt.Errorf("auth-token: %w", err)
	}
	lc.Append(fx.Hook{OnStop: func(context.Context) error { tokens.Close(); return nil }})
	az := authz.New(tokens, lg.Named("auth"))
	if err := az.Load(st.AuthRecords); err != nil {
		return nil, err
	}
	return az, nil
}
