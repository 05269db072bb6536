package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/migrate"
	"github.com/kvd-dev/kvd/pkg/progress"
)

const migrateUsage = "usage: kvd migrate --data-dir DIR --to bolt|badger [--config FILE] [--from bolt|badger]"

// runMigrate is `kvd migrate`: it moves a stopped member's data to another
// storage engine (pkg/migrate). Engine options come from --config (the file
// the member runs with), defaults otherwise; --data-dir and --to override
// the file. Exit status 0 when the data dir was migrated, 1 when it was not,
// 2 for a bad command line.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvd migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, migrateUsage)
		fmt.Fprintln(stderr, "\nCopies a stopped member's backend to the other storage engine, checks the copy, and switches the data dir to it.\nStart the member afterwards with backend.engine (or --backend) set to the new engine.")
		fs.PrintDefaults()
	}
	dataDir := fs.String("data-dir", "", "the member's data directory (default: the config file's data-dir)")
	to := fs.String("to", "", "the engine to migrate to: bolt or badger")
	from := fs.String("from", "", "the engine to migrate from; needed only when the data dir holds both")
	path := fs.String("config", "", "the member's config file, for the engines' options")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvd migrate: unexpected argument %q\n%s\n", fs.Arg(0), migrateUsage)
		return 2
	}
	if *to == "" {
		fmt.Fprintf(stderr, "kvd migrate: --to is required\n%s\n", migrateUsage)
		return 2
	}
	cfg := config.Default()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			fmt.Fprintf(stderr, "kvd migrate: %v\n", err)
			return 2
		}
	} else if *dataDir == "" {
		fmt.Fprintf(stderr, "kvd migrate: --data-dir is required (or --config with data-dir)\n%s\n", migrateUsage)
		return 2
	}
	if *dataDir != "" {
		cfg.DataDir = *dataDir
	}
	cfg.Backend.Engine = *to
	lc := *cfg
	lc.LogLevel, lc.LogOutputs, lc.LogFormat = "warn", []string{"stderr"}, "console"
	lg, err := newLogger(&lc)
	if err != nil {
		fmt.Fprintf(stderr, "kvd migrate: %v\n", err)
		return 2
	}
	defer func() { _ = lg.Sync() }()

	// On a terminal (stderr an *os.File) the progress is a bar.
	res, err := migrate.Run(migrate.Options{Config: cfg, From: *from, To: *to, Progress: stderr, Logger: lg})
	if err != nil {
		fmt.Fprintf(stderr, "kvd migrate: %v\n", err)
		if res == nil {
			fmt.Fprintf(stderr, "kvd migrate: nothing changed: the data dir %s keeps its backend\n", cfg.DataDir)
		}
		return 1
	}
	printMigrate(stdout, cfg.DataDir, res)
	return 0
}

func printMigrate(w io.Writer, dataDir string, r *migrate.Result) {
	fmt.Fprintf(w, "migrated %s: %s -> %s in %s (copy %s, check %s)\n", dataDir, r.From, r.To,
		r.Total.Round(time.Millisecond), r.Copy.Round(time.Millisecond), r.Verify.Round(time.Millisecond))
	fmt.Fprintf(w, "copied %d records, %s of keys and values:", r.Records, progress.Bytes(r.Bytes))
	for _, b := range backend.AllBuckets {
		fmt.Fprintf(w, " %s %d", b, r.Buckets[b].Records)
	}
	fmt.Fprintf(w, "\n%d keys at revision %d (compacted at %d), consistent index %d, term %d\n", r.Keys, r.Rev, r.CompactRev, r.ConsistentIndex, r.Term)
	fmt.Fprintf(w, "HashKV at revision %d: before %d, after %d\n", r.Rev, r.HashBefore, r.HashAfter)
	fmt.Fprintf(w, "size on disk: %s %s, %s %s\n", r.From, progress.Bytes(r.SourceSize), r.To, progress.Bytes(r.TargetSize))
	for _, s := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", s)
	}
	fmt.Fprintf(w, "start the member with backend.engine: %s (or --backend %s)\n", r.To, r.To)
}
