// Package plugintest runs a plugin binary as kvd does (go-plugin
// handshake, gRPC) and hands a test the plugin's client, so a plugin's own
// tests exercise the real process and protocol.
package plugintest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
)

// Build compiles the main package pkg ("." from the plugin's own tests)
// into a fresh temporary directory. Call it once, from TestMain, and call
// cleanup when the tests are done.
func Build(pkg string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "kvd-plugin")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	bin = filepath.Join(dir, "plugin")
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, cleanup, nil
}

// Main is a plugin test package's TestMain: it builds the main package
// pkg, sets *bin to the binary, runs the tests and exits.
func Main(m *testing.M, pkg string, bin *string) {
	b, cleanup, err := Build(pkg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = b
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// Authenticator starts bin with args and returns its authenticator client;
// the process is stopped when the test ends.
func Authenticator(t testing.TB, bin string, args ...string) pb.AuthenticatorClient {
	return dispense(t, pluginsdk.KindAuthenticator, bin, args).(pb.AuthenticatorClient)
}

// Authorizer starts bin with args and returns its authorizer client.
func Authorizer(t testing.TB, bin string, args ...string) pb.AuthorizerClient {
	return dispense(t, pluginsdk.KindAuthorizer, bin, args).(pb.AuthorizerClient)
}

func dispense(t testing.TB, kind, bin string, args []string) any {
	t.Helper()
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginsdk.Handshake,
		Plugins:          pluginsdk.PluginSet(),
		Cmd:              exec.Command(bin, args...),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: os.Stderr, Level: hclog.Warn}),
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rpc.Dispense(kind)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
