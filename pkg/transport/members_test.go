package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// A joining member learns the member list from any peer that answers; a
// dead URL first in the list is skipped, a member without the callback or
// with a failing one is an error naming the URL.
func TestFetchMembers(t *testing.T) {
	withList := startMember(t, 1, 9, "", func(c *Config) {
		c.Members = func() ([]byte, error) { return []byte(`{"members":[1]}`), nil }
	})
	without := startMember(t, 2, 9, "", nil)
	failing := startMember(t, 3, 9, "", func(c *Config) {
		c.Members = func() ([]byte, error) { return nil, errors.New("not ready") }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + lis.Addr().String()
	lis.Close()
	b, err := FetchMembers(ctx, []string{without.url, dead, withList.url}, nil)
	if err != nil || string(b) != `{"members":[1]}` {
		t.Fatalf("fetch = %q, %v", b, err)
	}
	_, err = FetchMembers(ctx, []string{failing.url}, nil)
	if err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), failing.url) {
		t.Fatalf("fetch from failing member: %v", err)
	}
	if _, err := FetchMembers(ctx, []string{"ftp://x"}, nil); err == nil {
		t.Fatal("bad URL accepted")
	}
}
