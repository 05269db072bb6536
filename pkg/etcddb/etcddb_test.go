package etcddb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/badger"
	kbolt "github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// etcdSnapshot was saved with etcdctl snapshot save from etcd v3.7.3 after:
// put a 1, put b 2, put a 3, del b, lease grant 100, put --lease c 4,
// users root and u1, role r1 (read [/x, /y)), auth enable, compact 3.
// etcdutl snapshot status -w json prints etcdSnapshotStatus for it.
const etcdSnapshot = "testdata/etcd-v3.7.3.snapshot"

var etcdSnapshotStatus = Status{Hash: 1621277060, Revision: 6, TotalKey: 2, TotalSize: 20480, Version: "3.7.0"}

type engine struct {
	name string
	open func(t *testing.T, dir string) backend.Backend
}

// plainBackend hides an engine's BulkLoad: Import then uses Updates.
type plainBackend struct{ backend.Backend }

var engines = []engine{
	{"bolt-updates", func(t *testing.T, dir string) backend.Backend {
		be, err := kbolt.Open(backend.Options{Dir: dir}, kbolt.Options{InitialMmapSize: 1 << 20, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return plainBackend{be}
	}},
	{"bolt", func(t *testing.T, dir string) backend.Backend {
		be, err := kbolt.Open(backend.Options{Dir: dir}, kbolt.Options{InitialMmapSize: 1 << 20, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		return be
	}},
	{"badger", func(t *testing.T, dir string) backend.Backend {
		be, err := badger.Open(backend.Options{Dir: dir}, badger.Options{Logger: zap.NewNop(), MemTableSize: 8 << 20, ValueLogFileSize: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return be
	}},
}

func openBolt(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// verified is an etcd snapshot, hash and page checked, as a restore reads it.
func verified(t *testing.T, src string) string {
	t.Helper()
	if _, err := VerifyHash(src, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := kbolt.CheckReadable(src); err != nil {
		t.Fatal(err)
	}
	return src
}

func TestStatusAsEtcdutl(t *testing.T) {
	st, err := ReadStatus(openBolt(t, etcdSnapshot))
	if err != nil {
		t.Fatal(err)
	}
	if st != etcdSnapshotStatus {
		t.Fatalf("status %+v, etcdutl says %+v", st, etcdSnapshotStatus)
	}
}

func dumpBucket(t *testing.T, be backend.Backend, b backend.Bucket) []string {
	t.Helper()
	tx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Release()
	var out []string
	if err := tx.Range(b, nil, nil, 0, func(k, v []byte) bool {
		out = append(out, fmt.Sprintf("%q=%q", k, v))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportEtcdSnapshot(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			be := e.open(t, t.TempDir())
			defer be.Close()
			res, err := Import(openBolt(t, verified(t, etcdSnapshot)), be, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Revision != 6 || res.Revisions != 5 || res.Term != 2 || res.ConsistentIndex == 0 || len(res.Members) != 1 || res.Members[0].Name != "default" || len(res.Skipped) != 0 {
				t.Fatalf("import result %+v", res)
			}
			if got := dumpBucket(t, be, backend.Members); len(got) != 0 {
				t.Errorf("members written without KeepMembers: %v", got)
			}
			// Open the result as kvd does and look at it through mvcc and authz.
			st, err := mvcc.Open(be, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if st.Rev() != 6 || st.CompactRev() != 3 || st.ConsistentTerm() != 2 {
				t.Errorf("rev %d compact %d term %d, want 6 3 2", st.Rev(), st.CompactRev(), st.ConsistentTerm())
			}
			rt := st.Read()
			r, err := rt.Range([]byte("a"), []byte("z"), mvcc.RangeOptions{})
			rt.End()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := range r.KVs {
				kv := &r.KVs[i]
				got = append(got, fmt.Sprintf("%s=%s c%d m%d v%d l%t", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease != 0))
			}
			want := []string{"a=3 c2 m4 v2 lfalse", "c=4 c6 m6 v1 ltrue"}
			if !slices.Equal(got, want) {
				t.Errorf("range %v, want %v", got, want)
			}
			var leases []int64
			if err := st.Leases(func(id int64, _ []byte) error { leases = append(leases, id); return nil }); err != nil || len(leases) != 1 || leases[0] != r.KVs[1].Lease {
				t.Errorf("leases %x (%v), want the lease of c %x", leases, err, r.KVs[1].Lease)
			}
			az := authz.New(nil, zap.NewNop())
			if err := az.Load(st.AuthRecords); err != nil {
				t.Fatal(err)
			}
			if !az.Enabled() || !slices.Equal(az.UserNames(), []string{"root", "u1"}) || !slices.Equal(az.RoleNames(), []string{"r1"}) {
				t.Errorf("auth enabled %t users %v roles %v", az.Enabled(), az.UserNames(), az.RoleNames())
			}
		})
	}
}

// kvdBackend fills a backend in kvd's layout with one record of each kind.
func kvdBackend(t *testing.T, be backend.Backend) {
	t.Helper()
	kv := func(key, val string, create, mod, ver, lease int64) []byte {
		b, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(key), Value: []byte(val), CreateRevision: create, ModRevision: mod, Version: ver, Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rev := func(main int64, tomb bool) []byte {
		b := binary.BigEndian.AppendUint64(nil, uint64(main))
		b = append(b, '_')
		b = binary.BigEndian.AppendUint64(b, 0)
		if tomb {
			b = append(b, 't')
		}
		return b
	}
	u8 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	user, _ := proto.Marshal(&authpb.User{Name: []byte("u1"), Password: []byte("$2a$x"), Roles: []string{"r1"}})
	role, _ := proto.Marshal(&authpb.Role{Name: []byte("r1"), KeyPermission: []*authpb.Permission{{PermType: authpb.Permission_READWRITE, Key: []byte("/a"), RangeEnd: []byte("/b")}}})
	m1 := membership.Member{ID: 0x1111, Name: "n1", PeerURLs: []string{"http://127.0.0.1:2380"}, ClientURLs: []string{"http://127.0.0.1:2379"}}
	m2 := membership.Member{ID: 0x2222, Name: "n2", PeerURLs: []string{"http://127.0.0.1:2381"}, IsLearner: true}
	err := be.Update(func(w backend.WriteTx) error {
		for _, r := range []struct {
			b    backend.Bucket
			k, v []byte
		}{
			{backend.Key, rev(2, false), kv("a", "1", 2, 2, 1, 0)},
			{backend.Key, rev(3, false), kv("b", "2", 3, 3, 1, 0x77)},
			{backend.Key, rev(4, true), kv("a", "", 0, 0, 0, 0)[:3]},
			{backend.Lease, u8(0x77), []byte("\x08\x77\x10\x64")},
			{backend.Alarm, []byte("\x08\x01\x10\x01"), []byte{}},
			{backend.Meta, []byte(mvcc.MetaKeyConsistentIndex), u8(42)},
			{backend.Meta, []byte(mvcc.MetaKeyConsistentTerm), u8(3)},
			{backend.Meta, []byte(mvcc.MetaKeyScheduledCompact), rev(2, false)},
			{backend.Meta, []byte(mvcc.MetaKeyFinishedCompact), rev(2, false)},
			{backend.Members, []byte(membership.MemberKey(m1.ID)), m1.Marshal()},
			{backend.Members, []byte(membership.MemberKey(m2.ID)), m2.Marshal()},
			{backend.Members, []byte(membership.RemovedKey(0x3333)), []byte{}},
			{backend.Auth, []byte(authz.KeyEnabled), []byte{1}},
			{backend.Auth, []byte(authz.KeyRevision), u8(5)},
			{backend.Auth, []byte(authz.UserKeyPrefix + "u1"), user},
			{backend.Auth, []byte(authz.RoleKeyPrefix + "r1"), role},
		} {
			if err := w.Put(r.b, r.k, r.v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrip exports a kvd backend of each engine and imports the file
// into each engine: every bucket comes back byte for byte.
func TestRoundTrip(t *testing.T) {
	for _, from := range engines {
		for _, to := range engines {
			t.Run(from.name+"-"+to.name, func(t *testing.T) {
				src := from.open(t, t.TempDir())
				defer src.Close()
				kvdBackend(t, src)
				// ExportBackend: the bolt engine's file converted in place;
				// Export for the others (bolt-updates hides the engine).
				path := filepath.Join(t.TempDir(), "etcd.db")
				if err := ExportBackend(src, path); err != nil {
					t.Fatal(err)
				}
				if err := kbolt.CheckFile(path); err != nil {
					t.Fatal(err)
				}
				db := openBolt(t, path)
				checkEtcdLayout(t, db)
				dst := to.open(t, t.TempDir())
				defer dst.Close()
				res, err := Import(db, dst, ImportOptions{KeepMembers: true, BatchBytes: 64})
				if err != nil {
					t.Fatal(err)
				}
				if res.ConsistentIndex != 42 || res.Term != 3 || res.Revision != 4 || len(res.Members) != 2 || len(res.Removed) != 1 {
					t.Errorf("import result %+v", res)
				}
				for _, b := range backend.AllBuckets {
					if got, want := dumpBucket(t, dst, b), dumpBucket(t, src, b); !slices.Equal(got, want) {
						t.Errorf("bucket %s:\n got %v\nwant %v", b, got, want)
					}
				}
			})
		}
	}
}

// checkEtcdLayout reads an exported file as etcd would.
func checkEtcdLayout(t *testing.T, db *bolt.DB) {
	t.Helper()
	err := db.View(func(tx *bolt.Tx) error {
		for _, b := range etcdBuckets {
			if tx.Bucket([]byte(b)) == nil {
				t.Errorf("no bucket %s", b)
			}
		}
		get := func(b, k string) string { return string(tx.Bucket([]byte(b)).Get([]byte(k))) }
		for _, c := range []struct{ b, k, want string }{
			{bucketMeta, etcdMetaTerm, "\x00\x00\x00\x00\x00\x00\x00\x03"},
			{bucketMeta, etcdMetaStorageVersion, "3.7.0"},
			{bucketMeta, etcdMetaConfState, `{"voters":[4369],"learners":[8738],"auto_leave":false}`},
			{bucketCluster, etcdClusterVersion, "3.7.0"},
			{bucketAuth, etcdAuthEnabled, "\x01"},
			{bucketMembersRemoved, "3333", "removed"},
		} {
			if got := get(c.b, c.k); got != c.want {
				t.Errorf("%s/%s = %q, want %q", c.b, c.k, got, c.want)
			}
		}
		if m := get(bucketMembers, "1111"); !strings.Contains(m, `"id":4369`) || !strings.Contains(m, `"clientURLs":["http://127.0.0.1:2379"]`) {
			t.Errorf("members/1111 = %s", m)
		}
		if tx.Bucket([]byte(bucketAuthUsers)).Get([]byte("u1")) == nil || tx.Bucket([]byte(bucketAuthRoles)).Get([]byte("r1")) == nil {
			t.Error("user u1 or role r1 missing")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatus(db); err != nil {
		t.Errorf("status of an exported file: %v", err)
	}
}

func TestVerifyHashRefusesDamage(t *testing.T) {
	good, err := os.ReadFile(etcdSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := bytes.Clone(good)
	flipped[5000] ^= 0xff
	for _, c := range []struct {
		name string
		data []byte
		skip bool
		want string
	}{
		{"flipped", flipped, false, "expected sha256"},
		{"truncated", good[:len(good)-1000], false, "missing hash"},
		{"no-trailer", good[:len(good)-32], false, "missing hash"},
		{"empty", nil, false, "missing hash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyHash(write(c.name, c.data), c.skip, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
	// Without the trailer and with --skip-hash-check: accepted, and the
	// page check still refuses a truncated file.
	cut := write("skip", good[:len(good)-32-8192])
	if n, err := VerifyHash(cut, true, nil); err != nil || n != int64(len(good)-32-8192) {
		t.Fatalf("VerifyHash with skip: %d, %v", n, err)
	}
	if err := kbolt.CheckReadable(cut); err == nil {
		t.Error("CheckReadable accepted a truncated file")
	}
}

// TestImportRefusesBadRecords: records kvd could not open fail the import,
// naming the record, whatever the engine.
func TestImportRefusesBadRecords(t *testing.T) {
	rev := append(binary.BigEndian.AppendUint64(nil, 2), '_', 0, 0, 0, 0, 0, 0, 0, 0)
	for _, c := range []struct {
		name         string
		bucket, k, v string
		want         string
	}{
		{"garbage-kv", bucketKey, string(rev), "\xff\xff\xff", "revision"},
		{"kv-without-key", bucketKey, string(rev), "\x10\x02", "without a key"},
		{"short-revision", bucketKey, "\x00\x01", "\n\x01a", "bad revision key"},
		{"lease-key", bucketLease, "abc", "", "bad lease key"},
		{"member-id", bucketMembers, "zz", `{"id":1}`, "member key"},
		{"member-json", bucketMembers, "1", `{"id":`, "member"},
		{"user", bucketAuthUsers, "u1", "\xff", "auth user"},
		{"compact-mark", bucketMeta, mvcc.MetaKeyFinishedCompact, "x", "bad revision"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "db")
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *bolt.Tx) error {
				for _, b := range []string{bucketKey, bucketMeta, c.bucket} {
					if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
						return err
					}
				}
				return tx.Bucket([]byte(c.bucket)).Put([]byte(c.k), []byte(c.v))
			}); err != nil {
				t.Fatal(err)
			}
			be := engines[1].open(t, t.TempDir())
			defer be.Close()
			if _, err := Import(db, be, ImportOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}
