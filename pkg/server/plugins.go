package server

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/pluginhost"
)

// newPlugins runs the configured auth plugins for as long as the member
// runs. They start before the member serves clients, and a plugin that
// cannot start stops the member's start with an error naming it.
func newPlugins(lc fx.Lifecycle, c *config.Config, az *authz.Store, mt *Metrics, tr trace.Tracer, lg *zap.Logger) (*pluginhost.Host, error) {
	if len(c.AuthPlugins) == 0 {
		return nil, nil
	}
	h, err := pluginhost.New(PluginSpecs(c), pluginhost.Options{Logger: lg, Registerer: mt.Registry, Tracer: tr})
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return h.Start() },
		OnStop:  func(context.Context) error { h.Close(); return nil },
	})
	if h.HasAuthenticators() {
		az.SetExternalTokens(func(ctx context.Context, token string) (authz.Info, bool, error) {
			id, ok, err := h.Token(ctx, token)
			return authz.Info{User: id.User, Via: id.Plugin, Roles: id.Groups}, ok, err
		})
	}
	return h, nil
}

// PluginSpecs are the config's auth-plugins as the plugin host takes them
// (defaults filled in by config.Complete).
func PluginSpecs(c *config.Config) []pluginhost.Spec {
	specs := make([]pluginhost.Spec, 0, len(c.AuthPlugins))
	for _, p := range c.AuthPlugins {
		s := pluginhost.Spec{
			Name: p.Name, Kind: p.Kind, Command: p.Command, Args: p.Args, Env: p.Env,
			Timeout: p.Timeout.Std(), OnFailure: p.OnFailure,
		}
		if p.CacheTTL != nil {
			s.CacheTTL = p.CacheTTL.Std()
		}
		specs = append(specs, s)
	}
	return specs
}
