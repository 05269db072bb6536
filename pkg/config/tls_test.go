package config

import (
	"flag"
	"slices"
	"testing"
)

func TestValidateTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
		want []string // nil: valid
	}{
		{"client cert without key", func(c *Config) { c.PeerTLS.ClientCertFile = "c.pem" },
			[]string{"peer-transport-security.client-cert-file", "client-key-file"}},
		{"cn and hostname", func(c *Config) {
			c.PeerTLS = TLS{CertFile: "p.pem", KeyFile: "p.key", TrustedCAFile: "ca.pem", ClientCertAuth: true,
				AllowedCNs: []string{"a"}, AllowedHostnames: []string{"h"}}
		}, []string{"peer-transport-security.allowed-cn", "mutually exclusive"}},
		{"cn without client certs", func(c *Config) {
			c.PeerTLS = TLS{CertFile: "p.pem", KeyFile: "p.key", AllowedCNs: []string{"a"}}
		}, []string{"peer-transport-security.allowed-cn", "client-cert-auth"}},
		{"empty cn", func(c *Config) {
			c.PeerTLS = TLS{CertFile: "p.pem", KeyFile: "p.key", TrustedCAFile: "ca.pem", AllowedCNs: []string{"a", ""}}
		}, []string{"peer-transport-security.allowed-cn", "empty"}},
		{"https metrics without certs", func(c *Config) { c.ListenMetricsURLs = "https://127.0.0.1:2381" },
			[]string{"listen-metrics-urls", "client-transport-security"}},
		{"cn with client cert auth", func(c *Config) {
			c.PeerTLS = TLS{CertFile: "p.pem", KeyFile: "p.key", TrustedCAFile: "ca.pem", ClientCertAuth: true, AllowedCNs: []string{"peer"}}
		}, nil},
		{"hostname with trusted ca", func(c *Config) {
			c.ClientTLS = TLS{CertFile: "s.pem", KeyFile: "s.key", TrustedCAFile: "ca.pem", AllowedHostnames: []string{"example.com"}}
		}, nil},
		{"https metrics with auto-tls", func(c *Config) { c.ListenMetricsURLs, c.ClientTLS.AutoTLS = "https://127.0.0.1:2381", true }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, tc.want...)
		})
	}
}

func TestTLSFlagsAndKeys(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{
		"--peer-cert-allowed-cn", "m1,m2", "--client-cert-allowed-hostname", "a.example",
		"--peer-client-cert-file", "pc.pem", "--peer-client-key-file", "pc.key",
		"--client-cert-file", "cc.pem", "--client-key-file", "cc.key",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.PeerTLS.AllowedCNs, []string{"m1", "m2"}) || !slices.Equal(c.ClientTLS.AllowedHostnames, []string{"a.example"}) ||
		c.PeerTLS.ClientCertFile != "pc.pem" || c.PeerTLS.ClientKeyFile != "pc.key" ||
		c.ClientTLS.ClientCertFile != "cc.pem" || c.ClientTLS.ClientKeyFile != "cc.key" {
		t.Errorf("flags not bound: client %+v peer %+v", c.ClientTLS, c.PeerTLS)
	}
	if c.ClientTLS.Empty() || !(TLS{}).Empty() {
		t.Error("Empty is wrong")
	}

	p := writeFile(t, `
peer-transport-security:
  cert-file: p.pem
  key-file: p.key
  client-cert-auth: true
  trusted-ca-file: ca.pem
  allowed-cn: [m1, m2]
client-transport-security:
  allowed-hostname: [a.example]
  client-cert-file: cc.pem
  client-key-file: cc.key
`)
	c, err = Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.PeerTLS.AllowedCNs, []string{"m1", "m2"}) || !slices.Equal(c.ClientTLS.AllowedHostnames, []string{"a.example"}) ||
		c.ClientTLS.ClientCertFile != "cc.pem" {
		t.Errorf("keys not loaded: client %+v peer %+v", c.ClientTLS, c.PeerTLS)
	}
}
