package authz

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

func TestHeaderCarriesPluginIdentity(t *testing.T) {
	who := Info{User: "alice", Revision: 9, Via: "corp-sso", Roles: []string{"app", "ops"}}
	h := &pb.RequestHeader{ID: 5}
	StampHeader(h, who)
	// Through the wire, as the entry goes through raft and the WAL.
	data, err := proto.Marshal(&pb.InternalRaftRequest{Header: h, Put: &pb.PutRequest{Key: []byte("k")}})
	if err != nil {
		t.Fatal(err)
	}
	var back pb.InternalRaftRequest
	if err := proto.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if got := CallerOf(back.Header); !reflect.DeepEqual(got, who) {
		t.Fatalf("CallerOf = %+v, want %+v", got, who)
	}
	if back.Header.Username != "alice" || back.Header.AuthRevision != 9 || back.Header.ID != 5 {
		t.Fatalf("etcd's fields: %+v", back.Header)
	}
	// A kvd user's header has no extension.
	plain := &pb.RequestHeader{}
	StampHeader(plain, Info{User: "bob", Revision: 3})
	if got := CallerOf(plain); !reflect.DeepEqual(got, Info{User: "bob", Revision: 3}) || len(plain.ProtoReflect().GetUnknown()) != 0 {
		t.Fatalf("plain: %+v", got)
	}
}

func TestPluginIdentityPermissions(t *testing.T) {
	h := newHarness(t)
	h.setupRootAndReader()
	h.must(&pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "writer"}})
	h.must(&pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "writer",
		Perm: &authpb.Permission{PermType: authpb.Permission_WRITE, Key: []byte("/app/w")}}})
	h.must(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}})
	rev := h.s.Revision()
	// "carol" exists nowhere in the store; "alice" does, but a plugin's
	// alice has the plugin's roles, not the stored user's.
	carol := Info{User: "carol", Revision: rev, Via: "sso", Roles: []string{"reader", "writer", "no-such-role"}}
	pluginAlice := Info{User: "alice", Revision: rev, Via: "sso"}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"carol reads via reader", h.s.CheckRead(carol, []byte("/app/x"), nil), nil},
		{"carol writes via writer", h.s.CheckWrite(carol, []byte("/app/w"), nil), nil},
		{"carol writes elsewhere", h.s.CheckWrite(carol, []byte("/app/x"), nil), rpctypes.ErrGRPCPermissionDenied},
		{"carol is no admin", h.s.CheckAdmin(carol), rpctypes.ErrGRPCPermissionDenied},
		{"plugin alice has no stored roles", h.s.CheckRead(pluginAlice, []byte("/app/x"), nil), rpctypes.ErrGRPCPermissionDenied},
		{"stale plugin identity", h.s.CheckRead(Info{User: "carol", Revision: rev - 1, Via: "sso", Roles: carol.Roles}, []byte("/app/x"), nil), rpctypes.ErrGRPCAuthOldRevision},
		{"group root is root", h.s.CheckAdmin(Info{User: "dave", Revision: rev, Via: "sso", Roles: []string{"root"}}), nil},
		{"empty plugin user", h.s.CheckRead(Info{Revision: rev, Via: "sso", Roles: []string{"reader"}}, []byte("/app/x"), nil), rpctypes.ErrGRPCPermissionDenied},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
	// A role losing a permission applies at once to plugin identities too.
	h.as = Info{User: "root", Revision: rev}
	h.must(&pb.InternalRaftRequest{AuthRoleRevokePermission: &pb.AuthRoleRevokePermissionRequest{Role: "reader", Key: []byte("/app/"), RangeEnd: []byte("/app0")}})
	carol.Revision = h.s.Revision()
	if err := h.s.CheckRead(carol, []byte("/app/x"), nil); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("after revoke: %v", err)
	}
	// RoleGet of a held role, as for a stored user.
	h.as = carol
	h.must(&pb.InternalRaftRequest{AuthRoleGet: &pb.AuthRoleGetRequest{Role: "writer"}})
	h.fails(&pb.InternalRaftRequest{AuthRoleGet: &pb.AuthRoleGetRequest{Role: "root"}}, rpctypes.ErrGRPCPermissionDenied)
}

func TestAuthenticatePluginIdentity(t *testing.T) {
	c := newTokClock()
	s := New(newTestSimple(t, time.Minute, c), nil)
	h := &harness{t: t, s: s, be: memBucket{}}
	h.setupRootAndReader()
	h.must(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}})
	// Without a plugin's word, a user the store lacks fails.
	h.fails(&pb.InternalRaftRequest{Authenticate: &pb.InternalAuthenticateRequest{Name: "carol", SimpleToken: "abcdefghijklmnop"}}, rpctypes.ErrGRPCAuthFailed)
	hdr := &pb.RequestHeader{}
	StampHeader(hdr, Info{User: "carol", Via: "sso", Roles: []string{"reader"}})
	resp, err := s.Apply(h.be, &pb.InternalRaftRequest{Header: hdr, Authenticate: &pb.InternalAuthenticateRequest{Name: "carol", SimpleToken: "abcdefghijklmnop"}}, 7, &pb.ResponseHeader{})
	if err != nil {
		t.Fatal(err)
	}
	tok := resp.(*pb.AuthenticateResponse).Token
	who, err := s.Identify(context.Background(), tok, true, false)
	want := Info{User: "carol", Revision: s.Revision(), Via: "sso", Roles: []string{"reader"}}
	if err != nil || !reflect.DeepEqual(who, want) {
		t.Fatalf("Identify = %+v, %v; want %+v", who, err, want)
	}
	if err := s.CheckRead(who, []byte("/app/x"), nil); err != nil {
		t.Fatal(err)
	}
	// Deleting a stored user of the same name leaves the plugin's token.
	h.as = Info{User: "root", Revision: s.Revision()}
	h.must(&pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: "carol", HashedPassword: hashed("c")}})
	h.must(&pb.InternalRaftRequest{AuthUserDelete: &pb.AuthUserDeleteRequest{Name: "carol"}})
	if _, err := s.Identify(context.Background(), tok, true, false); err != nil {
		t.Fatalf("plugin token after a stored user of its name went: %v", err)
	}
}

func TestIdentifyAsksExternalTokens(t *testing.T) {
	s := New(newTestSimple(t, time.Minute, newTokClock()), nil)
	h := &harness{t: t, s: s, be: memBucket{}}
	h.setupRootAndReader()
	h.must(&pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}})
	ctx := context.Background()
	if _, err := s.Identify(ctx, "idp-token", true, false); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
		t.Fatalf("without plugins: %v", err)
	}
	boom := errors.New("plugin down")
	s.SetExternalTokens(func(_ context.Context, tok string) (Info, bool, error) {
		switch tok {
		case "idp-token":
			return Info{User: "carol", Via: "sso", Roles: []string{"reader"}}, true, nil
		case "broken":
			return Info{}, false, boom
		}
		return Info{}, false, nil
	})
	who, err := s.Identify(ctx, "idp-token", true, false)
	if err != nil || who.User != "carol" || who.Revision != s.Revision() || who.Via != "sso" {
		t.Fatalf("idp token: %+v %v", who, err)
	}
	if _, err := s.Identify(ctx, "broken", true, false); !errors.Is(err, boom) {
		t.Fatalf("failing plugin: %v", err)
	}
	if _, err := s.Identify(ctx, "nobody's", true, false); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
		t.Fatalf("unclaimed token: %v", err)
	}
}

func TestJWTCarriesPluginIdentity(t *testing.T) {
	c := newTokClock()
	p := newTestJWT(t, fmt.Sprintf("jwt,priv-key=%s,sign-method=ES256", writeTokPriv(t, tokKeys()["P256"].key, false)), c)
	who := Info{User: "carol", Revision: 4, Via: "sso", Roles: []string{"app"}}
	tok, err := p.Assign(who, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := p.Info(tok, 0)
	if !ok || !reflect.DeepEqual(got, who) {
		t.Fatalf("Info = %+v %v, want %+v", got, ok, who)
	}
}
