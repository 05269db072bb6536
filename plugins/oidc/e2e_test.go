package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
	"github.com/kvd-dev/kvd/pkg/pluginsdk/plugintest"
)

// pluginBin is the plugin built once for the package's tests.
var pluginBin string

func TestMain(m *testing.M) { plugintest.Main(m, ".", &pluginBin) }

// dispense starts the plugin binary as kvd does.
func dispense(t *testing.T, args ...string) pb.AuthenticatorClient {
	t.Helper()
	return plugintest.Authenticator(t, pluginBin, args...)
}

func TestEndToEnd(t *testing.T) {
	testKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, file, jwksJSON(t, pub(rsaKey, "rsa1", "RS256"), pub(ecKey, "ec1", "ES256")))
	c := dispense(t, "--issuer", testIssuer, "--audience", testAudience, "--jwks-file", file, "--user-claim", "preferred_username")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(req *pb.AuthenticateRequest) *pb.AuthenticateResponse {
		t.Helper()
		resp, err := c.Authenticate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	tokenReq := func(tok string) *pb.AuthenticateRequest {
		return &pb.AuthenticateRequest{Credential: &pb.AuthenticateRequest_Token{Token: tok}}
	}

	exp := time.Now().Add(time.Hour).Unix()
	for _, tok := range []string{
		sign(t, jose.RS256, rsaKey, "rsa1", claims("u1", "preferred_username", "alice", "groups", []string{"writers"}, "exp", exp)),
		sign(t, jose.ES256, ecKey, "ec1", claims("u1", "preferred_username", "alice", "groups", "writers", "exp", exp)),
	} {
		resp := call(tokenReq(tok))
		if resp.GetDecision() != pb.Decision_DECISION_ACCEPT || resp.GetUser() != "alice" || !slices.Equal(resp.GetGroups(), []string{"writers"}) || resp.GetExpiresUnix() != exp {
			t.Errorf("valid token: %v", resp)
		}
	}

	resp := call(tokenReq(sign(t, jose.RS256, rsaKey, "rsa1", claims("u1", "preferred_username", "alice", "exp", time.Now().Add(-time.Hour).Unix()))))
	if resp.GetDecision() != pb.Decision_DECISION_REJECT || !strings.Contains(resp.GetReason(), "expired") {
		t.Errorf("expired token: %v", resp)
	}

	for _, req := range []*pb.AuthenticateRequest{
		tokenReq(sign(t, jose.RS256, rsaKey, "rsa1", claims("u1", "iss", "https://other.example.com"))),
		tokenReq("kvdsimpletoken.7"),
		{Credential: &pb.AuthenticateRequest_Password{Password: &pb.PasswordCredential{User: "alice", Password: "pw"}}},
	} {
		if resp := call(req); resp.GetDecision() != pb.Decision_DECISION_ABSTAIN {
			t.Errorf("%v: %v, want abstain", req, resp)
		}
	}
}

// TestEndToEndStartupError: a bad configuration stops the plugin before it
// serves, with the reason on stderr.
func TestEndToEndStartupError(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--audience", "kvd", "--jwks-file", "x"}, "--issuer"},
		{[]string{"--issuer", testIssuer, "--audience", "kvd", "--jwks-file", filepath.Join(t.TempDir(), "missing")}, "--jwks-file"},
	} {
		cmd := exec.Command(pluginBin, c.args...)
		cmd.Env = append(os.Environ(), pluginsdk.Handshake.MagicCookieKey+"="+pluginsdk.Handshake.MagicCookieValue)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%v: exited 0, want an error", c.args)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%v: output %q does not name %s", c.args, out, c.want)
		}
	}
}
