// Command oidc is a kvd authenticator plugin that accepts JWTs of one
// OpenID Connect issuer (a client's --auth-jwt-token): it checks the
// signature against the issuer's JWKS (a file, re-read when it changes, or
// a URL), the issuer, the audience and the expiry, and takes the user and
// its groups, which become kvd roles, from the token's claims. Tokens of
// other issuers and passwords are left to the next authenticator.
//
//	oidc --issuer https://idp.example.com --audience kvd --jwks-file /etc/kvd/jwks.json
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

func main() {
	var cfg config
	fs := flag.NewFlagSet("oidc", flag.ExitOnError)
	fs.StringVar(&cfg.issuer, "issuer", "", "the issuer `URL`, exactly as in the tokens' iss (required)")
	fs.StringVar(&cfg.audience, "audience", "", "the `AUD` the tokens must be issued for (required)")
	fs.StringVar(&cfg.jwksFile, "jwks-file", "", "the issuer's JSON Web Key Set `FILE`, re-read when it changes")
	fs.StringVar(&cfg.jwksURL, "jwks-url", "", "the issuer's JSON Web Key Set `URL` (instead of --jwks-file)")
	fs.StringVar(&cfg.userClaim, "user-claim", "sub", "the `CLAIM` that names the user")
	fs.StringVar(&cfg.groupsClaim, "groups-claim", "groups", "the `CLAIM` that lists the user's groups (kvd roles)")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: never returns an error

	a, err := newAuthenticator(cfg, reloadInterval, pluginsdk.Logger(), nil)
	if err != nil {
		// Before Serve: kvd shows this and the exit status as the reason
		// the plugin did not start.
		fmt.Fprintln(os.Stderr, "oidc:", err)
		os.Exit(1)
	}
	pluginsdk.ServeAuthenticator(a)
}
