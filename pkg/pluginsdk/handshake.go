// Package pluginsdk is the Go SDK for kvd's auth plugins: a plugin
// implements Authenticator or Authorizer and calls Serve from its main.
// It also holds what kvd and a plugin must agree on (the handshake and the
// plugin names), so the host uses it too.
//
// The protocol itself is proto/authplugin/v1/authplugin.proto over
// HashiCorp's go-plugin; a plugin in another language speaks it directly
// (docs/plugins.md).
package pluginsdk

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
)

// ProtocolVersion is the version of the plugin protocol. kvd refuses a
// plugin that speaks another.
const ProtocolVersion = 1

// Handshake is what kvd sets in the plugin's environment
// (KVD_AUTH_PLUGIN=<cookie>) and what the plugin answers with: a binary
// run by hand, or a plugin of another program, stops at once.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "KVD_AUTH_PLUGIN",
	MagicCookieValue: "8c1f0b8e6a4d4f1a9d3e2b7c5a6f0e41",
}

// The names of the two plugin kinds, as they appear in the config's kind:
// and in the go-plugin plugin set.
const (
	KindAuthenticator = "authenticator"
	KindAuthorizer    = "authorizer"
)

// PluginSet is the go-plugin set kvd dispenses from: each kind's client is
// the generated gRPC client (pb.AuthenticatorClient, pb.AuthorizerClient).
func PluginSet() plugin.PluginSet {
	return plugin.PluginSet{
		KindAuthenticator: &authenticatorPlugin{},
		KindAuthorizer:    &authorizerPlugin{},
	}
}

type authenticatorPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl pb.AuthenticatorServer
}

func (p *authenticatorPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterAuthenticatorServer(s, p.impl)
	return nil
}

func (p *authenticatorPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewAuthenticatorClient(c), nil
}

type authorizerPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl pb.AuthorizerServer
}

func (p *authorizerPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterAuthorizerServer(s, p.impl)
	return nil
}

func (p *authorizerPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pb.NewAuthorizerClient(c), nil
}
