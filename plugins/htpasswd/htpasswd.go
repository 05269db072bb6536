package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
	"github.com/kvd-dev/kvd/plugins/internal/filewatch"
)

// reloadInterval is how often, at most, the files are stat'ed for changes.
const reloadInterval = time.Second

// parseHtpasswd reads an Apache htpasswd file into user → bcrypt hash.
// Entries with another hash kind (MD5 "$apr1$", SHA "{SHA}", crypt, plain)
// are not accepted: they are left out, and their users are returned in
// skipped so the caller can say so. Blank lines and "#" comments are
// allowed; a line without "user:" is an error.
func parseHtpasswd(data []byte) (users map[string][]byte, skipped []string, err error) {
	users = map[string][]byte{}
	for n, line := range lines(data) {
		if line == "" {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, nil, fmt.Errorf("line %d: not a user:hash entry", n)
		}
		if _, dup := users[user]; dup || slices.Contains(skipped, user) {
			// Apache uses the first entry of a user; so do we.
			continue
		}
		if !isBcrypt(hash) {
			skipped = append(skipped, user)
			continue
		}
		// bcrypt accepts any minor version letter, so "$2y$" (what
		// htpasswd -B writes) compares as is; Cost checks the whole form.
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			skipped = append(skipped, user)
			continue
		}
		users[user] = []byte(hash)
	}
	return users, skipped, nil
}

func isBcrypt(hash string) bool {
	for _, p := range []string{"$2y$", "$2a$", "$2b$"} {
		if strings.HasPrefix(hash, p) {
			return true
		}
	}
	return false
}

// parseGroups reads an Apache group file ("group: user1 user2" lines) into
// user → its groups, sorted. A group may span several lines.
func parseGroups(data []byte) (map[string][]string, error) {
	groups := map[string][]string{}
	for n, line := range lines(data) {
		if line == "" {
			continue
		}
		group, members, ok := strings.Cut(line, ":")
		group = strings.TrimSpace(group)
		if !ok || group == "" || strings.ContainsAny(group, " \t") {
			return nil, fmt.Errorf("line %d: not a \"group: user ...\" entry", n)
		}
		for _, u := range strings.Fields(members) {
			if !slices.Contains(groups[u], group) {
				groups[u] = append(groups[u], group)
			}
		}
	}
	for _, g := range groups {
		slices.Sort(g)
	}
	return groups, nil
}

// lines yields each line's number (from 1) and its text, trimmed, with
// "#" comment lines given as empty.
func lines(data []byte) func(func(int, string) bool) {
	return func(yield func(int, string) bool) {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "#") {
				line = ""
			}
			if !yield(n, line) {
				return
			}
		}
	}
}

// authenticator checks user names and passwords against the htpasswd file
// and maps users to groups with the optional group file.
type authenticator struct {
	users  *filewatch.File[map[string][]byte]
	groups *filewatch.File[map[string][]string] // nil without --groups
}

// newAuthenticator loads both files; an error is a start-up error.
func newAuthenticator(file, groupFile string, interval time.Duration, log hclog.Logger) (*authenticator, error) {
	a := &authenticator{}
	a.users = filewatch.New(file, interval, log, func(data []byte) (map[string][]byte, error) {
		users, skipped, err := parseHtpasswd(data)
		for _, u := range skipped {
			log.Warn("skipping an entry that is not a bcrypt hash (only bcrypt is accepted)", "user", u, "path", file)
		}
		return users, err
	})
	if err := a.users.Load(); err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	if groupFile != "" {
		a.groups = filewatch.New(groupFile, interval, log, parseGroups)
		if err := a.groups.Load(); err != nil {
			return nil, fmt.Errorf("--groups: %w", err)
		}
	}
	return a, nil
}

func (a *authenticator) Authenticate(_ context.Context, c pluginsdk.Credential) (pluginsdk.Identity, error) {
	if c.Token != "" || c.User == "" {
		return pluginsdk.Identity{}, pluginsdk.ErrAbstain
	}
	hash, ok := a.users.Get()[c.User]
	if !ok {
		return pluginsdk.Identity{}, pluginsdk.ErrAbstain
	}
	if err := bcrypt.CompareHashAndPassword(hash, []byte(c.Password)); err != nil {
		if errors.Is(err, bcrypt.ErrMismatchedHashAndPassword) {
			return pluginsdk.Identity{}, fmt.Errorf("invalid password for user %q", c.User)
		}
		// Too long a password, say: still a reject, and the error text
		// (bcrypt's own) holds no secret.
		return pluginsdk.Identity{}, fmt.Errorf("cannot check the password of user %q: %v", c.User, err)
	}
	id := pluginsdk.Identity{User: c.User}
	if a.groups != nil {
		id.Groups = slices.Clone(a.groups.Get()[c.User])
	}
	return id, nil
}
