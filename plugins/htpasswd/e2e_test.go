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
	dir := t.TempDir()
	file, groups := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "groups")
	writeFile(t, file, "alice:"+hash(t, "alice-pw", "$2y$")+"\n")
	writeFile(t, groups, "writers: alice\nreaders: alice\n")
	c := dispense(t, "--file", file, "--groups", groups)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	password := func(user, pw string) *pb.AuthenticateRequest {
		return &pb.AuthenticateRequest{Credential: &pb.AuthenticateRequest_Password{Password: &pb.PasswordCredential{User: user, Password: pw}}}
	}
	resp, err := c.Authenticate(ctx, password("alice", "alice-pw"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDecision() != pb.Decision_DECISION_ACCEPT || resp.GetUser() != "alice" || !slices.Equal(resp.GetGroups(), []string{"readers", "writers"}) || resp.GetExpiresUnix() != 0 {
		t.Errorf("alice: %v", resp)
	}

	resp, err = c.Authenticate(ctx, password("alice", "wrong-pw"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDecision() != pb.Decision_DECISION_REJECT || !strings.Contains(resp.GetReason(), "alice") || strings.Contains(resp.GetReason(), "wrong-pw") {
		t.Errorf("wrong password: %v", resp)
	}

	for _, req := range []*pb.AuthenticateRequest{
		password("nobody", "x"),
		{Credential: &pb.AuthenticateRequest_Token{Token: "a.b.c"}},
	} {
		resp, err = c.Authenticate(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetDecision() != pb.Decision_DECISION_ABSTAIN {
			t.Errorf("%v: %v, want abstain", req, resp)
		}
	}
}

// TestEndToEndStartupError: a missing --file stops the plugin before it
// serves, with the reason on stderr.
func TestEndToEndStartupError(t *testing.T) {
	for _, args := range [][]string{
		{"--file", filepath.Join(t.TempDir(), "missing")},
		{},
	} {
		cmd := exec.Command(pluginBin, args...)
		cmd.Env = append(os.Environ(), pluginsdk.Handshake.MagicCookieKey+"="+pluginsdk.Handshake.MagicCookieValue)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%v: exited 0, want an error", args)
		}
		if !strings.Contains(string(out), "--file") {
			t.Errorf("%v: output %q does not say what is wrong", args, out)
		}
	}
}
