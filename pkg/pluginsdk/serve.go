package pluginsdk

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
)

// Credential is what a caller presents: a user name and password (etcd's
// Authenticate call), or a token kvd did not mint (Token set, User and
// Password empty).
type Credential struct {
	User     string
	Password string
	Token    string
}

// Identity is who an accepted credential belongs to. Groups become kvd
// roles of the same name. Expires, if set, is when the credential stops
// being valid (a token's expiry).
type Identity struct {
	User    string
	Groups  []string
	Expires time.Time
}

// ErrAbstain is what an Authenticator returns for a credential that is not
// its own (a user it does not know, a token of another issuer): the next
// authenticator decides, then kvd's own users.
var ErrAbstain = errors.New("not this plugin's credential")

// An Authenticator says who a credential belongs to. It returns the
// identity, ErrAbstain, or any other error to reject the credential (the
// error's text is logged by kvd: never put the secret in it).
type Authenticator interface {
	Authenticate(ctx context.Context, c Credential) (Identity, error)
}

// Request is what an Authorizer is asked about: who (the user, its kvd
// roles, and the plugin that authenticated it, empty for kvd's own users),
// the gRPC method, and the keys it touches.
type Request struct {
	User          string
	Roles         []string
	Authenticator string
	Method        string
	Accesses      []Access
}

// Access is one key (RangeEnd empty) or range [Key, RangeEnd) a request
// reads or writes; RangeEnd "\x00" means every key from Key on.
type Access struct {
	Write    bool
	Key      []byte
	RangeEnd []byte
}

// An Authorizer returns nil to allow (no objection: kvd's roles still
// apply) or an error to deny, whose text kvd logs.
type Authorizer interface {
	Authorize(ctx context.Context, r Request) error
}

// A Scoper is an Authorizer that can say how far an allow reaches: after
// allowing r, Scope returns keys or ranges (each for reads or for writes)
// within which the same caller, through the same method, would be allowed
// anything too, so kvd does not ask again inside them for the plugin's
// cache-ttl. Never return a scope wider than Authorize would allow.
type Scoper interface {
	Scope(r Request) []Access
}

// logger writes JSON lines to the process's real stderr, which kvd reads.
// It is made at init: go-plugin's Serve later points os.Stderr elsewhere.
var logger = hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Debug})

// Logger is the plugin's logger: its lines reach kvd's log under the
// plugin's name, at their level.
func Logger() hclog.Logger { return logger }

// ServeAuthenticator serves a as the plugin's authenticator; it returns when
// kvd stops the plugin.
func ServeAuthenticator(a Authenticator) {
	serve(KindAuthenticator, &authenticatorPlugin{impl: authenticatorServer{a: a}})
}

// ServeAuthorizer serves a as the plugin's authorizer; it returns when kvd
// stops the plugin.
func ServeAuthorizer(a Authorizer) {
	serve(KindAuthorizer, &authorizerPlugin{impl: authorizerServer{a: a}})
}

func serve(kind string, p plugin.Plugin) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{kind: p},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
}

type authenticatorServer struct {
	pb.UnimplementedAuthenticatorServer
	a Authenticator
}

func (s authenticatorServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	c := Credential{Token: r.GetToken()}
	if p := r.GetPassword(); p != nil {
		c = Credential{User: p.GetUser(), Password: p.GetPassword()}
	}
	id, err := s.a.Authenticate(ctx, c)
	switch {
	case errors.Is(err, ErrAbstain):
		return &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_ABSTAIN}, nil
	case err != nil:
		return &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_REJECT, Reason: err.Error()}, nil
	case id.User == "":
		return &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_REJECT, Reason: "plugin accepted the credential without a user name"}, nil
	}
	resp := &pb.AuthenticateResponse{Decision: pb.Decision_DECISION_ACCEPT, User: id.User, Groups: id.Groups}
	if !id.Expires.IsZero() {
		resp.ExpiresUnix = id.Expires.Unix()
	}
	return resp, nil
}

type authorizerServer struct {
	pb.UnimplementedAuthorizerServer
	a Authorizer
}

func (s authorizerServer) Authorize(ctx context.Context, r *pb.AuthorizeRequest) (*pb.AuthorizeResponse, error) {
	req := Request{
		User:          r.GetIdentity().GetUser(),
		Roles:         r.GetIdentity().GetRoles(),
		Authenticator: r.GetIdentity().GetAuthenticator(),
		Method:        r.GetMethod(),
		Accesses:      make([]Access, 0, len(r.GetAccesses())),
	}
	for _, a := range r.GetAccesses() {
		if a.GetAccess() == pb.Access_ACCESS_UNSPECIFIED {
			return &pb.AuthorizeResponse{Verdict: pb.Verdict_VERDICT_DENY, Reason: "access of unknown kind"}, nil
		}
		req.Accesses = append(req.Accesses, Access{Write: a.GetAccess() == pb.Access_ACCESS_WRITE, Key: a.GetKey(), RangeEnd: a.GetRangeEnd()})
	}
	if err := s.a.Authorize(ctx, req); err != nil {
		return &pb.AuthorizeResponse{Verdict: pb.Verdict_VERDICT_DENY, Reason: err.Error()}, nil
	}
	resp := &pb.AuthorizeResponse{Verdict: pb.Verdict_VERDICT_ALLOW}
	if sc, ok := s.a.(Scoper); ok {
		for _, a := range sc.Scope(req) {
			acc := pb.Access_ACCESS_READ
			if a.Write {
				acc = pb.Access_ACCESS_WRITE
			}
			resp.Scopes = append(resp.Scopes, &pb.KeyAccess{Access: acc, Key: a.Key, RangeEnd: a.RangeEnd})
		}
	}
	return resp, nil
}
