package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/crypto/bcrypt"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

// hash returns a cheap bcrypt hash of pw with the given prefix ("$2a$",
// "$2b$" or "$2y$"; x/crypto writes "$2a$").
func hash(t testing.TB, pw, prefix string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return prefix + strings.TrimPrefix(string(h), "$2a$")
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink safe for the concurrent test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(buf *syncBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: buf, JSONFormat: true, Level: hclog.Debug})
}

func TestParseHtpasswd(t *testing.T) {
	a, b, y := hash(t, "pa", "$2a$"), hash(t, "pb", "$2b$"), hash(t, "py", "$2y$")
	data := strings.Join([]string{
		"# a comment",
		"",
		"alice:" + a,
		"  bob:" + b + "  ",
		"yann:" + y,
		"md5:$apr1$abcdefgh$0123456789012345678901",
		"sha:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=",
		"crypt:rqXexS6ZhobKA",
		"broken:$2y$10$tooshort",
		"alice:" + b, // a second entry: the first wins, as in Apache
	}, "\n")
	users, skipped, err := parseHtpasswd([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"alice": a, "bob": b, "yann": y}
	if len(users) != len(want) {
		t.Fatalf("users = %v, want %v", users, want)
	}
	for u, h := range want {
		if string(users[u]) != h {
			t.Errorf("users[%q] = %q, want %q", u, users[u], h)
		}
	}
	if wantSkipped := []string{"md5", "sha", "crypt", "broken"}; !slices.Equal(skipped, wantSkipped) {
		t.Errorf("skipped = %v, want %v", skipped, wantSkipped)
	}

	for _, bad := range []string{"nocolon", ":" + a, "ok:" + a + "\n\nbad line"} {
		if _, _, err := parseHtpasswd([]byte(bad)); err == nil {
			t.Errorf("parseHtpasswd(%q) = nil error, want one", bad)
		}
	}
}

func TestParseGroups(t *testing.T) {
	data := "# groups\n\nwriters: alice bob\nadmins:alice\n  readers: bob   carol \nwriters: dave alice\nempty:\n"
	got, err := parseGroups([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"alice": {"admins", "writers"},
		"bob":   {"readers", "writers"},
		"carol": {"readers"},
		"dave":  {"writers"},
	}
	if len(got) != len(want) {
		t.Fatalf("groups = %v, want %v", got, want)
	}
	for u, g := range want {
		if !slices.Equal(got[u], g) {
			t.Errorf("groups[%q] = %v, want %v", u, got[u], g)
		}
	}
	for _, bad := range []string{"no colon here", ": alice", "two words: alice"} {
		if _, err := parseGroups([]byte(bad)); err == nil {
			t.Errorf("parseGroups(%q) = nil error, want one", bad)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	dir := t.TempDir()
	file, groups := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "groups")
	writeFile(t, file, "alice:"+hash(t, "alice-pw", "$2y$")+"\nbob:"+hash(t, "bob-pw", "$2b$")+"\nold:$apr1$abcdefgh$0123456789012345678901\n")
	writeFile(t, groups, "writers: alice\nadmins: alice bob\n")
	var logs syncBuffer
	a, err := newAuthenticator(file, groups, time.Hour, testLogger(&logs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	id, err := a.Authenticate(ctx, pluginsdk.Credential{User: "alice", Password: "alice-pw"})
	if err != nil || id.User != "alice" || !slices.Equal(id.Groups, []string{"admins", "writers"}) {
		t.Errorf("alice ($2y$) = %+v, %v; want alice [admins writers]", id, err)
	}
	id, err = a.Authenticate(ctx, pluginsdk.Credential{User: "bob", Password: "bob-pw"})
	if err != nil || id.User != "bob" || !slices.Equal(id.Groups, []string{"admins"}) {
		t.Errorf("bob ($2b$) = %+v, %v; want bob [admins]", id, err)
	}

	_, err = a.Authenticate(ctx, pluginsdk.Credential{User: "alice", Password: "secret-guess"})
	if err == nil || errors.Is(err, pluginsdk.ErrAbstain) {
		t.Fatalf("wrong password: err = %v, want a reject", err)
	}
	if !strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), "secret-guess") {
		t.Errorf("reject reason %q: want the user and no password", err)
	}

	for _, c := range []pluginsdk.Credential{
		{User: "nobody", Password: "x"},
		{User: "old", Password: "x"}, // an MD5 entry is never accepted
		{Token: "some.jwt.token"},
		{},
	} {
		if _, err := a.Authenticate(ctx, c); !errors.Is(err, pluginsdk.ErrAbstain) {
			t.Errorf("Authenticate(%+v) err = %v, want ErrAbstain", c, err)
		}
	}

	// One warning naming the skipped user; no hash or password in the log.
	l := logs.String()
	if n := strings.Count(l, `"user":"old"`); n != 1 || !strings.Contains(l, `"@level":"warn"`) {
		t.Errorf("want one warning naming user old, log:\n%s", l)
	}
	if strings.Contains(l, "$apr1$") || strings.Contains(l, "alice-pw") || strings.Contains(l, "secret-guess") {
		t.Errorf("log holds a secret:\n%s", l)
	}
}

func TestNoGroupFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "htpasswd")
	writeFile(t, file, "alice:"+hash(t, "pw", "$2a$")+"\n")
	a, err := newAuthenticator(file, "", time.Hour, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Authenticate(context.Background(), pluginsdk.Credential{User: "alice", Password: "pw"})
	if err != nil || id.User != "alice" || len(id.Groups) != 0 {
		t.Errorf("got %+v, %v; want alice with no groups", id, err)
	}
}

func TestStartupErrors(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	writeFile(t, good, "alice:"+hash(t, "pw", "$2a$")+"\n")
	writeFile(t, bad, "not an entry\n")
	for _, c := range []struct{ file, groups string }{
		{filepath.Join(dir, "missing"), ""},
		{bad, ""},
		{good, filepath.Join(dir, "missing")},
		{good, bad},
	} {
		if _, err := newAuthenticator(c.file, c.groups, time.Hour, hclog.NewNullLogger()); err == nil {
			t.Errorf("newAuthenticator(%q, %q) = nil error, want one", c.file, c.groups)
		}
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	file, groups := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "groups")
	writeFile(t, file, "alice:"+hash(t, "pw1", "$2y$")+"\n")
	writeFile(t, groups, "g1: alice\n")
	var logs syncBuffer
	// Interval 0: every call looks at the files.
	a, err := newAuthenticator(file, groups, 0, testLogger(&logs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(user, pw string, wantGroups ...string) {
		t.Helper()
		id, err := a.Authenticate(ctx, pluginsdk.Credential{User: user, Password: pw})
		if err != nil || id.User != user || !slices.Equal(id.Groups, wantGroups) {
			t.Fatalf("%s: got %+v, %v; want groups %v", user, id, err, wantGroups)
		}
	}
	check("alice", "pw1", "g1")

	// A changed password, a new user and new groups are picked up.
	replace(t, file, "alice:"+hash(t, "pw2", "$2y$")+"\nbob:"+hash(t, "pwb", "$2b$")+"\n")
	replace(t, groups, "g2: alice bob\ng0: alice\n")
	check("alice", "pw2", "g0", "g2")
	check("bob", "pwb", "g2")
	if _, err := a.Authenticate(ctx, pluginsdk.Credential{User: "alice", Password: "pw1"}); err == nil || errors.Is(err, pluginsdk.ErrAbstain) {
		t.Fatalf("old password: err = %v, want a reject", err)
	}

	// A file that no longer parses, or is gone, keeps the last good one.
	replace(t, file, "garbage\n")
	replace(t, groups, "garbage\n")
	check("bob", "pwb", "g2")
	check("bob", "pwb", "g2")
	if n := strings.Count(logs.String(), "cannot reload file"); n != 2 {
		t.Errorf("want one reload error per file, got %d; log:\n%s", n, logs.String())
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	check("bob", "pwb", "g2")

	// And a good file after that is read again.
	writeFile(t, file, "carol:"+hash(t, "pwc", "$2a$")+"\n")
	bumpMtime(t, file)
	replace(t, groups, "g3: carol\n")
	check("carol", "pwc", "g3")
	if _, err := a.Authenticate(ctx, pluginsdk.Credential{User: "bob", Password: "pwb"}); !errors.Is(err, pluginsdk.ErrAbstain) {
		t.Fatalf("removed user: err = %v, want ErrAbstain", err)
	}
}

// TestReloadInterval: within the interval the file is not looked at.
func TestReloadInterval(t *testing.T) {
	file := filepath.Join(t.TempDir(), "htpasswd")
	writeFile(t, file, "alice:"+hash(t, "pw", "$2a$")+"\n")
	a, err := newAuthenticator(file, "", time.Hour, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	replace(t, file, "bob:"+hash(t, "pw", "$2a$")+"\n")
	if _, err := a.Authenticate(context.Background(), pluginsdk.Credential{User: "alice", Password: "pw"}); err != nil {
		t.Errorf("alice within the interval: %v, want the old contents", err)
	}
}

// TestConcurrent runs calls and reloads together (for -race).
func TestConcurrent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "htpasswd")
	h := hash(t, "pw", "$2a$")
	writeFile(t, file, "alice:"+h+"\n")
	a, err := newAuthenticator(file, "", 0, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if _, err := a.Authenticate(context.Background(), pluginsdk.Credential{User: "alice", Password: "pw"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 20 {
		replace(t, file, "alice:"+h+"\n"+strings.Repeat("#\n", i))
	}
	wg.Wait()
}

// replace writes a file as an editor or config management would (a new
// file renamed over the old), so the change is seen even within one mtime
// tick.
func replace(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// bumpMtime moves a file's mtime so an in-place rewrite is seen even on a
// file system with a coarse clock.
func bumpMtime(t testing.TB, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mt := fi.ModTime().Add(time.Second)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}
