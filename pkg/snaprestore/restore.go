// Package snaprestore makes a new member's data dir from a snapshot file in
// etcd's format (etcdctl snapshot save from etcd or from kvd, or an etcd
// member's member/snap/db with SkipHashCheck), as etcdutl snapshot restore
// does: the keys, leases, auth and alarms of the file, and the member list
// of the new cluster named by initial-cluster. Run it once per member with
// the same snapshot and the same initial-cluster, then start every member.
package snaprestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/backend"
	kbolt "github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/datadir"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/etcddb"
	"github.com/kvd-dev/kvd/pkg/fsutil"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/progress"
	"github.com/kvd-dev/kvd/pkg/raftlog"
)

// Config is what to restore and where; the names follow etcdutl's flags.
type Config struct {
	SnapshotPath string
	// Name is this member's name in InitialCluster.
	Name string
	// DataDir must not exist or be empty; default <Name>.kvd.
	DataDir string
	// WALDir, if set, must not exist; default <DataDir>/member/wal.
	WALDir string
	// PeerURLs are this member's advertised peer URLs; they must be its
	// URLs in InitialCluster.
	PeerURLs            []string
	InitialCluster      string
	InitialClusterToken string
	// SkipHashCheck accepts a file without (or with a wrong) sha256
	// trailer: a db copied from a data dir has none.
	SkipHashCheck bool
	// RevisionBump raises the revision by this much and MarkCompacted
	// compacts at the result (both or neither), so that clients watching
	// the old cluster never see revisions go back.
	RevisionBump  uint64
	MarkCompacted bool
	// Engine is kvd's engine for the new backend: bolt (default) or badger.
	// Its options come from EngineConfig (nil: defaults).
	Engine       string
	EngineConfig *config.Config
	// Progress receives progress lines (nil: none).
	Progress io.Writer
	Logger   *zap.Logger
}

// Result is what Restore made.
type Result struct {
	ClusterID, MemberID uint64
	// Revision is the restored store's revision; Revisions the revision
	// records copied.
	Revision  int64
	Revisions int
	Members   []membership.Member
	// Skipped are buckets of the file kvd does not know.
	Skipped []string
	Took    time.Duration
}

// Restore builds the data dir beside its final place and renames it there
// once everything in it is synced: an error or a crash leaves no data dir
// that looks complete, only a "<data-dir>.restore-tmp" that the next
// Restore removes.
func Restore(cfg Config) (res Result, err error) {
	start := time.Now()
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Engine == "" {
		cfg.Engine = "bolt"
	}
	if cfg.Engine, err = engine.Canonical(cfg.Engine); err != nil {
		return res, fmt.Errorf("--backend: %w", err)
	}
	if (cfg.RevisionBump == 0) != !cfg.MarkCompacted {
		return res, errors.New("--mark-compacted required if --revision-bump > 0")
	}
	members, clusterID, self, err := initialMembers(cfg)
	if err != nil {
		return res, err
	}
	if cfg.DataDir == "" {
		cfg.DataDir = cfg.Name + ".kvd"
	}
	if err := checkEmpty(cfg.DataDir); err != nil {
		return res, err
	}
	if cfg.WALDir != "" {
		if _, err := os.Stat(cfg.WALDir); !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("wal-dir %q exists", cfg.WALDir)
		}
	}
	if _, err := os.Stat(cfg.SnapshotPath); err != nil {
		return res, err
	}

	stage := strings.TrimRight(cfg.DataDir, string(filepath.Separator)) + ".restore-tmp"
	walStage := ""
	if cfg.WALDir != "" {
		walStage = strings.TrimRight(cfg.WALDir, string(filepath.Separator)) + ".restore-tmp"
	}
	for _, d := range []string{stage, walStage} {
		if d != "" {
			if err := os.RemoveAll(d); err != nil {
				return res, fmt.Errorf("remove the leftover of an interrupted restore: %w", err)
			}
		}
	}
	walPlaced := false
	defer func() {
		if err != nil {
			os.RemoveAll(stage)
			if walStage != "" {
				os.RemoveAll(walStage)
			}
			if walPlaced {
				os.RemoveAll(cfg.WALDir)
			}
		}
	}()

	ec := config.Default()
	if cfg.EngineConfig != nil {
		ec = cfg.EngineConfig
	}
	sc := *ec
	sc.DataDir, sc.WALDir = stage, ""
	sc.Backend.Engine = cfg.Engine
	sc.Complete()
	if walStage != "" {
		sc.WALDir = walStage
	}
	if err := fsutil.MkdirAll(sc.SnapDir(), 0o700); err != nil {
		return res, err
	}

	// The file's db, hash checked, then page checked before bolt opens it.
	fi, _ := os.Stat(cfg.SnapshotPath)
	meter := meterFor(cfg.Progress, "check "+filepath.Base(cfg.SnapshotPath), fi.Size())
	_, err = etcddb.VerifyHash(cfg.SnapshotPath, cfg.SkipHashCheck, meter.Reader)
	meter.Done()
	if err != nil {
		return res, err
	}
	if err := kbolt.CheckReadable(cfg.SnapshotPath); err != nil {
		return res, fmt.Errorf("snapshot %s is not a sound bolt file: %w", cfg.SnapshotPath, err)
	}
	if err := engine.CheckLoadSpace(&sc, cfg.Engine, filepath.Dir(stage), fi.Size()); err != nil {
		return res, err
	}
	imp, err := load(cfg, &sc, cfg.SnapshotPath, members)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device") {
			err = fmt.Errorf("%w: %v (the partial data dir is removed)", engine.ErrNoSpace, err)
		}
		return res, err
	}
	if err := writeWAL(sc.WALPath(), members, cfg.Logger); err != nil {
		return res, err
	}
	err = datadir.WriteIdentity(filepath.Join(sc.MemberDir(), datadir.IdentityFile), datadir.Identity{
		ClusterID: fmt.Sprintf("%x", clusterID), MemberID: fmt.Sprintf("%x", self), Name: cfg.Name,
		Bootstrap: "new", Token: cfg.InitialClusterToken,
	})
	if err != nil {
		return res, err
	}
	if err := syncTree(stage); err != nil {
		return res, err
	}
	if walStage != "" {
		if err := syncTree(walStage); err != nil {
			return res, err
		}
		// A separate wal-dir takes a rename of its own, first: a crash
		// between the two leaves a wal-dir without its data dir, which a
		// new restore refuses ("wal-dir exists") until it is removed.
		if err := rename(walStage, cfg.WALDir); err != nil {
			return res, err
		}
		walPlaced = true
	}
	// An empty data dir that exists is replaced; checkEmpty allowed it.
	if err := os.Remove(cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, err
	}
	if err := rename(stage, cfg.DataDir); err != nil {
		return res, err
	}
	return Result{ClusterID: clusterID, MemberID: self, Revision: imp.rev, Revisions: imp.Revisions,
		Members: members, Skipped: imp.Skipped, Took: time.Since(start)}, nil
}

func meterFor(w io.Writer, what string, total int64) *progress.Meter {
	if w == nil {
		return progress.Discard()
	}
	return progress.New(w, what, total)
}

// initialMembers checks the member's place in initial-cluster, as etcd's
// VerifyBootstrap does, and derives the members and IDs as etcd does.
func initialMembers(cfg Config) ([]membership.Member, uint64, uint64, error) {
	c := config.Default()
	c.InitialCluster = cfg.InitialCluster
	cluster, err := c.InitialClusterMap()
	if err != nil {
		return nil, 0, 0, err
	}
	urls := map[string][]string{}
	seen := map[string]string{}
	for name, us := range cluster {
		for _, u := range us {
			if other, dup := seen[u.String()]; dup {
				return nil, 0, 0, fmt.Errorf("initial-cluster: URL %s is given for both %s and %s", u.String(), other, name)
			}
			seen[u.String()] = name
			urls[name] = append(urls[name], u.String())
		}
	}
	mine, ok := urls[cfg.Name]
	if !ok {
		return nil, 0, 0, fmt.Errorf("member %q is not in --initial-cluster %q", cfg.Name, cfg.InitialCluster)
	}
	var adv []string
	for _, p := range cfg.PeerURLs {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, 0, 0, fmt.Errorf("--initial-advertise-peer-urls: invalid URL %q", p)
		}
		adv = append(adv, u.String())
	}
	a, b := slices.Sorted(slices.Values(adv)), slices.Sorted(slices.Values(mine))
	if !slices.Equal(a, b) {
		return nil, 0, 0, fmt.Errorf("--initial-cluster has %s=%s but missing from --initial-advertise-peer-urls=%s",
			cfg.Name, strings.Join(b, ","), strings.Join(a, ","))
	}
	members, clusterID := membership.Initial(urls, cfg.InitialClusterToken)
	var self uint64
	for _, m := range members {
		if m.Name == cfg.Name {
			self = m.ID
		}
	}
	return members, clusterID, self, nil
}

func checkEmpty(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil || len(ents) > 0:
		return fmt.Errorf("data-dir %q not empty or could not be read", dir)
	}
	return nil
}

type imported struct {
	etcddb.Imported
	rev int64
}

// load imports the file into a new backend of the chosen engine and writes
// the new cluster's members and the raft position over the file's.
func load(cfg Config, sc *config.Config, dbPath string, members []membership.Member) (imported, error) {
	db, err := bolt.Open(dbPath, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return imported{}, fmt.Errorf("open snapshot db: %w", err)
	}
	defer db.Close()
	// The bytes of records to copy, for progress: the leaf pages in use.
	var size int64
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			size += int64(b.Stats().LeafInuse)
			return nil
		})
	})
	if err != nil {
		return imported{}, err
	}
	// One fsync at the end (Sync below) instead of one per batch: nothing
	// here is live before the final rename.
	ec := *sc
	ec.UnsafeNoFsync = true
	be, err := engine.Open(&ec, cfg.Engine, sc.BackendDir(), cfg.Logger)
	if err != nil {
		return imported{}, err
	}
	// Closes the first backend on the error paths; Close twice is harmless.
	defer be.Close()
	meter := meterFor(cfg.Progress, "restore into "+cfg.Engine, size)
	imp, err := etcddb.Import(db, be, etcddb.ImportOptions{BatchBytes: batchBytes(cfg.Engine), Progress: meter.Add})
	meter.Done()
	if err != nil {
		return imported{}, fmt.Errorf("snapshot %s: %w", cfg.SnapshotPath, err)
	}
	res := imported{Imported: imp, rev: max(imp.Revision, imp.CompactRevision, 1)}
	err = be.Update(func(w backend.WriteTx) error {
		for _, m := range members {
			if err := w.Put(backend.Members, []byte(membership.MemberKey(m.ID)), m.Marshal()); err != nil {
				return err
			}
		}
		// The raft position of a new cluster: one entry per member (the
		// conf changes writeWAL writes), term 1.
		put8 := func(k string, v uint64) error {
			return w.Put(backend.Meta, []byte(k), binary.BigEndian.AppendUint64(nil, v))
		}
		if err := put8(mvcc.MetaKeyConsistentIndex, uint64(len(members))); err != nil {
			return err
		}
		if err := put8(mvcc.MetaKeyConsistentTerm, 1); err != nil {
			return err
		}
		if cfg.RevisionBump > 0 {
			// As etcdutl: an empty record at the new revision (etcd then
			// keeps it as the empty key's revision and counts it in HashKV,
			// see mvcc.CheckKV) and the compaction mark, which the
			// compaction resumed at start completes.
			res.rev += int64(cfg.RevisionBump)
			mark := binary.BigEndian.AppendUint64(nil, uint64(res.rev))
			mark = append(mark, '_')
			mark = binary.BigEndian.AppendUint64(mark, 0)
			if err := w.Put(backend.Key, mark, []byte{}); err != nil {
				return err
			}
			if err := w.Put(backend.Meta, []byte(mvcc.MetaKeyScheduledCompact), mark); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return imported{}, fmt.Errorf("write the new cluster into the backend: %w", err)
	}
	if err := be.Sync(); err != nil {
		return imported{}, err
	}
	return res, be.Close()
}

// batchBytes sizes the updates of the import for each engine: bolt copies
// on commit, so bigger is better; Badger has an update size limit.
func batchBytes(engine string) int {
	if engine == "badger" {
		return 8 << 20
	}
	return 64 << 20
}

// writeWAL writes the log of a new cluster whose bootstrap is already
// applied: one AddNode conf change per member at term 1, committed, and a
// raft snapshot at the last of them, which the backend's consistent index
// matches. kvd then starts as a member restarting, not bootstrapping.
func writeWAL(dir string, members []membership.Member, lg *zap.Logger) error {
	l, err := raftlog.Open(raftlog.Options{Dir: dir, Logger: lg})
	if err != nil {
		return err
	}
	ents := make([]*raftpb.Entry, 0, len(members))
	cs := &raftpb.ConfState{}
	for i, m := range members {
		cc, err := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(m.ID), Context: m.Marshal()})
		if err != nil {
			return errors.Join(err, l.Close())
		}
		ents = append(ents, &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Term: new(uint64(1)), Index: new(uint64(i + 1)), Data: cc})
		cs.Voters = append(cs.Voters, m.ID)
	}
	n := uint64(len(members))
	hs := &raftpb.HardState{Term: new(uint64(1)), Vote: new(members[0].ID), Commit: new(n)}
	if err := l.Save(hs, ents, nil); err != nil {
		return errors.Join(fmt.Errorf("write wal: %w", err), l.Close())
	}
	if err := l.CreateSnapshot(n, cs, nil); err != nil {
		return errors.Join(fmt.Errorf("write raft snapshot: %w", err), l.Close())
	}
	return l.Close()
}

// syncTree fsyncs every file and directory under root, so the rename that
// publishes it publishes complete files.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return fsutil.SyncDir(p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		return errors.Join(err, f.Close())
	})
}

func rename(from, to string) error {
	if err := fsutil.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		return err
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(to))
}
