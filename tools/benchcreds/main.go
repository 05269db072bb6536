// Command benchcreds makes the credentials scripts/bench-plugins.sh hands
// to kvd's auth plugins:
//
//	benchcreds htpasswd USER PASSWORD
//	    prints an htpasswd line "USER:<bcrypt hash>" (cost 10), for
//	    plugins/htpasswd --file
//	benchcreds oidc --issuer URL --audience AUD --sub USER [--groups g1,g2] [--ttl 1h] --jwks FILE
//	    makes an RSA-2048 key, writes its public half to FILE as a JSON Web
//	    Key Set (for plugins/oidc --jwks-file) and prints an RS256 JWT of
//	    that key with iss, aud, sub, groups, iat and exp
//
// The key is thrown away: the token and the key set are for one run.
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/crypto/bcrypt"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchcreds:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: benchcreds htpasswd USER PASSWORD | benchcreds oidc [flags]")
	}
	switch args[0] {
	case "htpasswd":
		if len(args) != 3 || args[1] == "" {
			return errors.New("usage: benchcreds htpasswd USER PASSWORD")
		}
		h, err := bcrypt.GenerateFromPassword([]byte(args[2]), bcrypt.DefaultCost)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s:%s\n", args[1], h)
		return err
	case "oidc":
		return oidc(args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q: want htpasswd or oidc", args[0])
}

func oidc(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchcreds oidc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	issuer := fs.String("issuer", "", "the token's iss (required)")
	audience := fs.String("audience", "", "the token's aud (required)")
	sub := fs.String("sub", "", "the token's sub, the user (required)")
	groups := fs.String("groups", "", "comma-separated groups claim (kvd roles)")
	ttl := fs.Duration("ttl", time.Hour, "the token's lifetime")
	jwksOut := fs.String("jwks", "", "write the JSON Web Key Set here (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *issuer == "" || *audience == "" || *sub == "" || *jwksOut == "" {
		return errors.New("oidc: --issuer, --audience, --sub and --jwks are required")
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	const kid = "bench"
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"}}}
	b, err := json.Marshal(set)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*jwksOut, b, 0o644); err != nil {
		return err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return err
	}
	now := time.Now()
	claims := map[string]any{
		"iss": *issuer,
		"aud": *audience,
		"sub": *sub,
		"iat": now.Add(-time.Minute).Unix(),
		"exp": now.Add(*ttl).Unix(),
	}
	if *groups != "" {
		claims["groups"] = strings.Split(*groups, ",")
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return err
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return err
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
