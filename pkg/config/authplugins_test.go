package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The auth-plugins block as documented: the contract for the file's shape.
const authPluginsExample = `
auth-plugins:
  - name: corp-sso                 # unique; used in logs, metrics and errors
    kind: authenticator            # authenticator | authorizer
    command: /usr/local/bin/kvd-auth-oidc
    args: ["--issuer", "https://sso.example.com", "--jwks-file", "/etc/kvd/jwks.json"]
    env: {}                        # extra environment for the plugin process
    timeout: 200ms                 # per call
    on-failure: deny               # deny (default) | skip
    cache-ttl: 5s                  # 0 disables
  - name: rbac
    kind: authorizer
    command: kvd-authz
    env:
      RBAC_POLICY: /etc/kvd/policy.yaml
`

func durp(d time.Duration) *Duration { v := Duration(d); return &v }

func TestLoadAuthPlugins(t *testing.T) {
	c, err := Load(writeFile(t, authPluginsExample))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []AuthPlugin{{
		Name:      "corp-sso",
		Kind:      AuthPluginAuthenticator,
		Command:   "/usr/local/bin/kvd-auth-oidc",
		Args:      []string{"--issuer", "https://sso.example.com", "--jwks-file", "/etc/kvd/jwks.json"},
		Env:       map[string]string{},
		Timeout:   Duration(200 * time.Millisecond),
		OnFailure: OnFailureDeny,
		CacheTTL:  durp(5 * time.Second),
	}, {
		// Defaults: timeout 500ms (an authorizer's), on-failure deny, cache-ttl 5s.
		Name:      "rbac",
		Kind:      AuthPluginAuthorizer,
		Command:   "kvd-authz",
		Env:       map[string]string{"RBAC_POLICY": "/etc/kvd/policy.yaml"},
		Timeout:   Duration(500 * time.Millisecond),
		OnFailure: OnFailureDeny,
		CacheTTL:  durp(5 * time.Second),
	}}
	if !reflect.DeepEqual(c.AuthPlugins, want) {
		t.Errorf("auth-plugins =\n%+v\nwant\n%+v", c.AuthPlugins, want)
	}
	// The other keys keep their defaults.
	c.AuthPlugins = nil
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("auth-plugins changed other keys: %+v", c)
	}
}

func TestAuthPluginsAbsentOrEmpty(t *testing.T) {
	for _, body := range []string{"name: default\n", "auth-plugins:\n", "auth-plugins: []\n"} {
		c, err := Load(writeFile(t, body))
		if err != nil {
			t.Fatalf("Load(%q): %v", body, err)
		}
		if len(c.AuthPlugins) != 0 {
			t.Errorf("Load(%q): auth-plugins = %+v", body, c.AuthPlugins)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Load(%q): %v", body, err)
		}
	}
}

func TestAuthPluginCacheTTL(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
	}{
		{"", 5 * time.Second},
		{"cache-ttl: ~", 5 * time.Second},
		{"cache-ttl: 0", 0},
		{"cache-ttl: 0s", 0},
		{"cache-ttl: 1m", time.Minute},
	} {
		body := "auth-plugins:\n  - name: p\n    kind: authorizer\n    command: p\n    " + tc.line + "\n"
		c, err := Load(writeFile(t, body))
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if p := c.AuthPlugins[0]; p.CacheTTL == nil || p.CacheTTL.Std() != tc.want {
			t.Errorf("%q: cache-ttl = %v, want %v", tc.line, p.CacheTTL, tc.want)
		}
	}
}

func TestAuthPluginsCompleteIdempotent(t *testing.T) {
	c := Default()
	c.AuthPlugins = []AuthPlugin{{Name: "p", Kind: AuthPluginAuthorizer, Command: "p", CacheTTL: durp(0), OnFailure: OnFailureSkip}}
	c.Complete()
	c.Complete()
	p := c.AuthPlugins[0]
	if p.Timeout != DefaultAuthPluginTimeout || p.OnFailure != OnFailureSkip || *p.CacheTTL != 0 {
		t.Errorf("after Complete: %+v (cache-ttl %v)", p, *p.CacheTTL)
	}
	c.AuthPlugins = []AuthPlugin{{Name: "sso", Kind: AuthPluginAuthenticator, Command: "sso"}}
	c.Complete()
	if got := c.AuthPlugins[0].Timeout; got != DefaultAuthenticatorPluginTimeout {
		t.Errorf("an authenticator's default timeout: %v, want %v", got, DefaultAuthenticatorPluginTimeout)
	}
}

func TestValidateDoesNotCompleteAuthPlugins(t *testing.T) {
	c := Default()
	c.AuthPlugins = []AuthPlugin{{Name: "p", Kind: AuthPluginAuthorizer, Command: "p"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := c.AuthPlugins[0]; p.Timeout != 0 || p.OnFailure != "" || p.CacheTTL != nil {
		t.Errorf("Validate changed the config: %+v", p)
	}
}

func TestLoadAuthPluginsErrors(t *testing.T) {
	const head = "auth-plugins:\n  - name: corp-sso\n    kind: authenticator\n"
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key with suggestion", head + "    comand: /bin/x\n",
			[]string{`line 4: auth-plugins[0].comand: unknown key (did you mean "command"?)`}},
		{"unknown key in second entry", head + "    command: x\n  - name: b\n    kid: authorizer\n",
			[]string{`line 6: auth-plugins[1].kid: unknown key (did you mean "kind"?)`}},
		{"duplicate key", head + "    command: x\n    kind: authorizer\n",
			[]string{"line 5: auth-plugins[0].kind: duplicate key (first at line 3)"}},
		{"element not a mapping", "auth-plugins:\n  - corp-sso\n",
			[]string{`line 2: auth-plugins[0]: want a mapping of keys, got "corp-sso"`}},
		{"empty element", "auth-plugins:\n  -\n",
			[]string{"line 2: auth-plugins[0]: want a mapping of keys, got an empty value"}},
		{"not a list", "auth-plugins:\n  name: corp-sso\n",
			[]string{"line 2: auth-plugins: want a list of mappings, got a mapping"}},
		{"invalid timeout", head + "    command: x\n    timeout: soon\n",
			[]string{"line 5: auth-plugins[0].timeout", `"soon"`}},
		{"args not a list", head + "    command: x\n    args: --verbose\n",
			[]string{"line 5: auth-plugins[0].args", "want a list of strings"}},
		{"env not a mapping", head + "    command: x\n    env: [A=b]\n",
			[]string{"line 5: auth-plugins[0].env"}},
		{"errors in several entries", "auth-plugins:\n  - nme: a\n  - name: b\n    cmd: x\n",
			[]string{"auth-plugins[0].nme", "auth-plugins[1].cmd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.body))
			wantErr(t, err, tc.want...)
		})
	}
}

func TestValidateAuthPlugins(t *testing.T) {
	ok := func() AuthPlugin {
		return AuthPlugin{Name: "corp-sso", Kind: AuthPluginAuthenticator, Command: "/usr/local/bin/kvd-auth-oidc"}
	}
	for _, tc := range []struct {
		name string
		ps   func() []AuthPlugin
		want []string // nil: valid
	}{
		{"minimal", func() []AuthPlugin { return []AuthPlugin{ok()} }, nil},
		{"skip, no cache, env", func() []AuthPlugin {
			p := ok()
			p.OnFailure, p.CacheTTL, p.Env = OnFailureSkip, durp(0), map[string]string{"TOKEN": "x=y"}
			return []AuthPlugin{p}
		}, nil},
		{"command is not resolved", func() []AuthPlugin {
			p := ok()
			p.Command = "./no/such/plugin"
			return []AuthPlugin{p}
		}, nil},
		{"wrong kind", func() []AuthPlugin {
			p := ok()
			p.Kind = "authentificator"
			return []AuthPlugin{{Name: "a", Kind: AuthPluginAuthorizer, Command: "a"}, p}
		}, []string{`auth-plugins[1] "corp-sso": kind "authentificator": want authenticator or authorizer`}},
		{"missing kind", func() []AuthPlugin { p := ok(); p.Kind = ""; return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": kind: missing: want authenticator or authorizer`}},
		{"duplicate name", func() []AuthPlugin { return []AuthPlugin{ok(), ok()} },
			[]string{`auth-plugins[1] "corp-sso": name: duplicate, auth-plugins[0] has it too`}},
		{"empty name", func() []AuthPlugin { p := ok(); p.Name = ""; return []AuthPlugin{p} },
			[]string{"auth-plugins[0]: name: must not be empty"}},
		{"missing command", func() []AuthPlugin { p := ok(); p.Command = ""; return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": command: must not be empty`}},
		{"bad on-failure", func() []AuthPlugin { p := ok(); p.OnFailure = "allow"; return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": on-failure "allow": want deny or skip`}},
		{"negative timeout", func() []AuthPlugin { p := ok(); p.Timeout = Duration(-time.Second); return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": timeout -1s: must be positive`}},
		{"negative cache-ttl", func() []AuthPlugin { p := ok(); p.CacheTTL = durp(-time.Second); return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": cache-ttl -1s: must not be negative`}},
		{"bare-number timeout", func() []AuthPlugin { p := ok(); p.Timeout = Duration(2); return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": timeout 2ns: under 1ms`}},
		{"bare-number cache-ttl", func() []AuthPlugin { p := ok(); p.CacheTTL = durp(5); return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": cache-ttl 5ns: under 1ms`}},
		{"env key with =", func() []AuthPlugin { p := ok(); p.Env = map[string]string{"A=B": "c"}; return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": env "A=B": a variable name must not contain '='`}},
		{"empty env key", func() []AuthPlugin { p := ok(); p.Env = map[string]string{"": "c"}; return []AuthPlugin{p} },
			[]string{`auth-plugins[0] "corp-sso": env: empty variable name`}},
		{"several problems, one plugin", func() []AuthPlugin { return []AuthPlugin{{Name: "x", Kind: "k"}} },
			[]string{`auth-plugins[0] "x": kind "k"`, `auth-plugins[0] "x": command`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.AuthPlugins = tc.ps()
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

// TestLoadAuthPluginsValidateFromFile goes file to message, the way a user
// meets these errors through Parse.
func TestLoadAuthPluginsValidateFromFile(t *testing.T) {
	_, err := Parse([]string{"--config", writeFile(t, `
auth-plugins:
  - name: corp-sso
    kind: authenticator
    command: /bin/true
    timeout: -5ms
  - name: corp-sso
    kind: authorizer
    command: /bin/true
    on-failure: ignore
    cache-ttl: -1s
`)})
	wantErr(t, err,
		`auth-plugins[0] "corp-sso": timeout -5ms: must be positive`,
		`auth-plugins[1] "corp-sso": name: duplicate`,
		`auth-plugins[1] "corp-sso": on-failure "ignore": want deny or skip`,
		`auth-plugins[1] "corp-sso": cache-ttl -1s: must not be negative`)
	if strings.Count(err.Error(), "\nauth-plugins[") != 4 {
		t.Errorf("want exactly 4 plugin errors, got:\n%v", err)
	}
}

func TestNoAuthPluginsFlag(t *testing.T) {
	_, err := Parse([]string{"--auth-plugins", "x"})
	wantErr(t, err, "auth-plugins")
}
