package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	kbolt "github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/etcddb"
	"github.com/kvd-dev/kvd/pkg/snaprestore"
)

const snapshotUsage = `usage:
  kvd snapshot status FILE [-w simple|table|json|fields]
  kvd snapshot restore FILE [--data-dir DIR] [--wal-dir DIR] [--name NAME]
      [--initial-cluster NAME=URL,...] [--initial-cluster-token TOKEN]
      [--initial-advertise-peer-urls URL,...] [--skip-hash-check]
      [--bump-revision N --mark-compacted] [--backend bolt|badger] [--config FILE]

FILE is a snapshot in etcd's format: etcdctl snapshot save against etcd or
kvd, or an etcd member's member/snap/db (with --skip-hash-check).`

// runSnapshot is `kvd snapshot status|restore`, etcdutl's commands with
// etcdutl's flags and output, for kvd's data dirs.
func runSnapshot(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, snapshotUsage)
		return 2
	}
	switch args[0] {
	case "status":
		return snapshotStatus(args[1:], stdout, stderr)
	case "restore":
		return snapshotRestore(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, snapshotUsage)
		return 0
	}
	fmt.Fprintf(stderr, "kvd snapshot: unknown command %q\n%s\n", args[0], snapshotUsage)
	return 2
}

// parseInterspersed parses flags placed before or after the positional
// arguments, as etcdutl's command line does.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func snapshotStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvd snapshot status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var format string
	fs.StringVar(&format, "write-out", "simple", "output format: simple, table, json or fields")
	fs.StringVar(&format, "w", "simple", "shorthand for --write-out")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "kvd: snapshot status requires exactly one argument")
		return 2
	}
	switch format {
	case "simple", "table", "json", "fields":
	default:
		fmt.Fprintf(stderr, "kvd: unknown output format %q (want simple, table, json or fields)\n", format)
		return 2
	}
	st, err := readSnapshotStatus(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "kvd: %v\n", err)
		return 1
	}
	printStatus(stdout, format, st)
	return 0
}

func readSnapshotStatus(path string) (etcddb.Status, error) {
	if _, err := os.Stat(path); err != nil {
		return etcddb.Status{}, err
	}
	// A damaged page must be an error here, not a crash inside bolt.
	if err := kbolt.CheckFile(path); err != nil {
		return etcddb.Status{}, fmt.Errorf("%s is not a sound bolt file: %w", path, err)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return etcddb.Status{}, err
	}
	defer db.Close()
	return etcddb.ReadStatus(db)
}

func printStatus(w io.Writer, format string, st etcddb.Status) {
	row := []string{fmt.Sprintf("%x", st.Hash), fmt.Sprint(st.Revision), fmt.Sprint(st.TotalKey), siBytes(uint64(st.TotalSize)), st.Version}
	switch format {
	case "json":
		b, _ := json.Marshal(st)
		fmt.Fprintln(w, string(b))
	case "fields":
		fmt.Fprintln(w, `"Hash" :`, st.Hash)
		fmt.Fprintln(w, `"Revision" :`, st.Revision)
		fmt.Fprintln(w, `"Keys" :`, st.TotalKey)
		fmt.Fprintln(w, `"Size" :`, st.TotalSize)
		fmt.Fprintln(w, `"Version" :`, st.Version)
	case "table":
		printTable(w, []string{"HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE", "VERSION"}, row)
	default:
		fmt.Fprintln(w, strings.Join(row, ", "))
	}
}

// printTable draws etcdutl's table: headers centred, values right-aligned.
func printTable(w io.Writer, hdr, row []string) {
	widths := make([]int, len(hdr))
	for i := range hdr {
		widths[i] = max(len(hdr[i]), len(row[i])) + 2
	}
	line := func(l, m, r string) {
		var b strings.Builder
		b.WriteString(l)
		for i, n := range widths {
			if i > 0 {
				b.WriteString(m)
			}
			b.WriteString(strings.Repeat("─", n))
		}
		b.WriteString(r)
		fmt.Fprintln(w, b.String())
	}
	cells := func(vals []string, centre bool) {
		var b strings.Builder
		b.WriteString("│")
		for i, v := range vals {
			pad := widths[i] - len(v)
			left := pad - 1
			if centre {
				left = pad / 2
			}
			b.WriteString(strings.Repeat(" ", left) + v + strings.Repeat(" ", pad-left) + "│")
		}
		fmt.Fprintln(w, b.String())
	}
	line("┌", "┬", "┐")
	cells(hdr, true)
	line("├", "┼", "┤")
	cells(row, false)
	line("└", "┴", "┘")
}

// siBytes formats n as go-humanize's Bytes does (etcdutl's size column).
func siBytes(n uint64) string {
	if n < 10 {
		return fmt.Sprintf("%d B", n)
	}
	sizes := []string{"B", "kB", "MB", "GB", "TB", "PB", "EB"}
	e := math.Floor(math.Log(float64(n)) / math.Log(1000))
	val := math.Floor(float64(n)/math.Pow(1000, e)*10+0.5) / 10
	f := "%.0f %s"
	if val < 10 {
		f = "%.1f %s"
	}
	return fmt.Sprintf(f, val, sizes[int(e)])
}

func snapshotRestore(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvd snapshot restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg        snaprestore.Config
		peerURLs   string
		configFile string
	)
	fs.StringVar(&cfg.DataDir, "data-dir", "", "path to the output data directory (default NAME.kvd)")
	fs.StringVar(&cfg.WALDir, "wal-dir", "", "path to the WAL directory (default DATA-DIR/member/wal)")
	fs.StringVar(&cfg.Name, "name", "default", "human-readable name for this member")
	fs.StringVar(&cfg.InitialCluster, "initial-cluster", "", "initial cluster configuration for restore bootstrap (default NAME=http://localhost:2380)")
	fs.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "initial cluster token for the cluster during restore bootstrap")
	fs.StringVar(&peerURLs, "initial-advertise-peer-urls", "http://localhost:2380", "list of this member's peer URLs to advertise to the rest of the cluster")
	fs.BoolVar(&cfg.SkipHashCheck, "skip-hash-check", false, "ignore snapshot integrity hash value (required if copied from data directory)")
	fs.Uint64Var(&cfg.RevisionBump, "bump-revision", 0, "how much to increase the latest revision after restore")
	fs.BoolVar(&cfg.MarkCompacted, "mark-compacted", false, "mark the latest revision after restore as the point of scheduled compaction (required if --bump-revision > 0, disallowed otherwise)")
	fs.StringVar(&cfg.Engine, "backend", "", "storage engine of the restored member: bolt or badger (default: the --config file's, else bolt)")
	fs.StringVar(&configFile, "config", "", "kvd config file whose backend options (engine and its tuning) the restored backend takes")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "kvd: snapshot restore requires exactly one argument")
		return 2
	}
	cfg.SnapshotPath = pos[0]
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.Name + "=http://localhost:2380"
	}
	cfg.PeerURLs = strings.Split(peerURLs, ",")
	if configFile != "" {
		ec, err := config.Load(configFile)
		if err != nil {
			fmt.Fprintf(stderr, "kvd: %v\n", err)
			return 2
		}
		cfg.EngineConfig = ec
		if cfg.Engine == "" {
			cfg.Engine = ec.Backend.Engine
		}
	}
	cfg.Progress = stderr
	cfg.Logger = zap.NewNop()
	res, err := snaprestore.Restore(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kvd: snapshot restore: %v\n", err)
		return 1
	}
	dataDir := cfg.DataDir
	if dataDir == "" {
		dataDir = cfg.Name + ".kvd"
	}
	fmt.Fprintf(stdout, "restored snapshot %s into %s: member %x of cluster %x, %d members, revision %d (%d revision records), engine %s, in %s\n",
		cfg.SnapshotPath, dataDir, res.MemberID, res.ClusterID, len(res.Members), res.Revision, res.Revisions, engineName(cfg.Engine), res.Took.Round(time.Millisecond))
	if len(res.Skipped) > 0 {
		fmt.Fprintf(stdout, "left out buckets kvd does not know: %s\n", strings.Join(res.Skipped, ", "))
	}
	return 0
}

func engineName(e string) string {
	if e == "" {
		return "bolt"
	}
	return e
}
