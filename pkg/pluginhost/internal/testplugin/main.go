// Command testplugin is an auth plugin whose misbehaviour is chosen by
// flags, for kvd's tests of the plugin host: it can hang, crash, answer
// garbage or speak another protocol version. It is not a product plugin.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
)

var (
	kind     = flag.String("kind", "authenticator", "authenticator or authorizer")
	users    = flag.String("users", "", "user:password:group1+group2,... the authenticator accepts; a token \"tok-<user>\" is that user's")
	deny     = flag.String("deny", "", "key prefix the authorizer denies")
	scopeTo  = flag.String("scope", "", "an allow reaches every key under this prefix (reads and writes)")
	hangFile = flag.String("hang-file", "", "while this file exists, calls hang")
	exitFile = flag.String("exit-file", "", "a call made while this file exists kills the process")
	garbage  = flag.Bool("garbage", false, "answer with an unspecified decision or verdict")
	emptyID  = flag.Bool("empty-identity", false, "accept every credential with an empty user name")
	version  = flag.Int("protocol-version", pluginsdk.ProtocolVersion, "handshake protocol version to announce")
	countTo  = flag.String("count-file", "", "append one line per call (probe excluded) to this file")
	stderr   = flag.String("stderr", "", "write this line to stderr at start")
	failWith = flag.String("fail-start", "", "print this to stderr and exit 1 instead of serving")
)

func main() {
	flag.Parse()
	if *stderr != "" {
		fmt.Fprintln(os.Stderr, *stderr)
	}
	if *failWith != "" {
		fmt.Fprintln(os.Stderr, *failWith)
		os.Exit(1)
	}
	hs := pluginsdk.Handshake
	hs.ProtocolVersion = uint(*version)
	var p plugin.Plugin
	switch *kind {
	case pluginsdk.KindAuthenticator:
		p = &authnPlugin{}
	case pluginsdk.KindAuthorizer:
		p = &authzPlugin{}
	default:
		fmt.Fprintf(os.Stderr, "testplugin: unknown --kind %q\n", *kind)
		os.Exit(2)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         plugin.PluginSet{*kind: p},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          pluginsdk.Logger(),
	})
}

// misbehave applies --hang-file (the call then fails when the caller gives
// up, never answering) and --exit-file, and counts the call.
func misbehave(ctx context.Context, probe bool) error {
	if *exitFile != "" {
		if _, err := os.Stat(*exitFile); err == nil {
			os.Exit(3)
		}
	}
	if *hangFile != "" {
		if _, err := os.Stat(*hangFile); err == nil {
			<-ctx.Done()
			return ctx.Err()
		}
	}
	if !probe && *countTo != "" {
		f, err := os.OpenFile(*countTo, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = f.WriteString("call\n")
			_ = f.Close()
		}
	}
	return nil
}

type authnPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (authnPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterAuthenticatorServer(s, authn{})
	return nil
}
func (authnPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("server side only")
}

type authn struct {
	pb.UnimplementedAuthenticatorServer
}

func (authn) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	if err := misbehave(ctx, r.GetCredential() == nil); err != nil {
		return nil, err
	}
	if *garbage {
		return &pb.AuthenticateResponse{}, nil
	}
	if *emptyID {
		return &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_ACCEPT}, nil
	}
	for _, u := range strings.Split(*users, ",") {
		name, rest, _ := strings.Cut(u, ":")
		pw, groups, _ := strings.Cut(rest, ":")
		if name == "" {
			continue
		}
		accept := &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_ACCEPT, User: name}
		if groups != "" {
			accept.Groups = strings.Split(groups, "+")
		}
		if c := r.GetPassword(); c != nil && c.GetUser() == name {
			if c.GetPassword() == pw {
				return accept, nil
			}
			return &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_REJECT, Reason: "wrong password"}, nil
		}
		if r.GetToken() == "tok-"+name {
			return accept, nil
		}
	}
	return &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_ABSTAIN}, nil
}

type authzPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (authzPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterAuthorizerServer(s, authz{})
	return nil
}
func (authzPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("server side only")
}

type authz struct {
	pb.UnimplementedAuthorizerServer
}

func (authz) Authorize(ctx context.Context, r *pb.AuthorizeRequest) (*pb.AuthorizeResponse, error) {
	if err := misbehave(ctx, r.GetIdentity() == nil); err != nil {
		return nil, err
	}
	if *garbage {
		return &pb.AuthorizeResponse{}, nil
	}
	for _, a := range r.GetAccesses() {
		if *deny != "" && strings.HasPrefix(string(a.GetKey()), *deny) {
			return &pb.AuthorizeResponse{Verdict: pb.Verdict_VERDICT_DENY, Reason: "key under " + *deny}, nil
		}
	}
	resp := &pb.AuthorizeResponse{Verdict: pb.Verdict_VERDICT_ALLOW}
	if *scopeTo != "" {
		end := []byte(*scopeTo)
		end[len(end)-1]++
		for _, acc := range []pb.Access{pb.Access_ACCESS_READ, pb.Access_ACCESS_WRITE} {
			resp.Scopes = append(resp.Scopes, &pb.KeyAccess{Access: acc, Key: []byte(*scopeTo), RangeEnd: end})
		}
	}
	return resp, nil
}
