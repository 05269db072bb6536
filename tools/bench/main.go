// Command bench is kvd's load tool. It speaks the etcd v3 KV gRPC API, so the
// same run measures kvd and etcd alike:
//
//	go run ./tools/bench [global flags] put|range|txn|watch|auth [flags]
//
// With --user it logs in once per connection and sends the token with every
// request; with --token it sends that token (e.g. an OIDC JWT for an
// authenticator plugin) as is; with --cacert, --cert and --key it speaks
// (mutual) TLS.
//
// It prints a summary in the layout of etcd's benchmark tool, or one JSON
// object per run with --json. Exit status: 0 when every measured request
// succeeded, 1 when the run could not be made (flags, connection, preload),
// 2 when it was made but some requests failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errRequestsFailed reports a run that completed with failed requests.
var errRequestsFailed = errors.New("some requests failed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := runArgs(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errRequestsFailed):
		return 2
	}
	fmt.Fprintf(stderr, "bench: %v\n", err)
	return 1
}

const globalUsage = `usage: bench [global flags] put|range|txn|watch|auth [flags]

Global flags:
`

func runArgs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		o                    runOptions
		endpoints            string
		asJSON               bool
		user, token          string
		cacert, cert, keyArg string
	)
	gfs := flag.NewFlagSet("bench", flag.ContinueOnError)
	gfs.SetOutput(stderr)
	gfs.Usage = func() {
		fmt.Fprint(stderr, globalUsage)
		gfs.PrintDefaults()
	}
	gfs.StringVar(&endpoints, "endpoints", "127.0.0.1:2379", "comma-separated gRPC endpoints (host:port, http://host:port or https://host:port)")
	gfs.IntVar(&o.clients, "clients", 100, "concurrent request loops")
	gfs.IntVar(&o.conns, "conns", 10, "gRPC connections; the clients are spread over them")
	gfs.Int64Var(&o.total, "total", 100000, "requests to measure (unbounded when only --duration is given)")
	gfs.DurationVar(&o.duration, "duration", 0, "measure for this long (with --total too, whichever comes first)")
	gfs.DurationVar(&o.warmup, "warmup", 0, "run the workload this long before measuring, unrecorded")
	gfs.DurationVar(&o.dialTimeout, "dial-timeout", 5*time.Second, "time for every connection to become ready (and, with --user, log in)")
	gfs.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "deadline of one request (0: none)")
	gfs.BoolVar(&asJSON, "json", false, "print one JSON object instead of the text summary")
	gfs.IntVar(&o.idleWatchers, "idle-watchers", 0, "put, range, txn: hold this many watchers on keys never written while measuring")
	gfs.IntVar(&o.idleStreams, "idle-streams", 10, "watch streams (over their own connections) carrying --idle-watchers")
	gfs.IntVar(&o.cpuPID, "cpu-pid", 0, "Linux: also report the CPU time this process (the server) used while measuring, and per request")
	gfs.StringVar(&user, "user", "", "name:password: each connection authenticates once and sends the token with every request")
	gfs.StringVar(&token, "token", "", "send this token as is in the \"token\" metadata of every request (no login; not with --user)")
	gfs.StringVar(&cacert, "cacert", "", "TLS: verify the servers with this CA bundle (endpoints then https:// or host:port)")
	gfs.StringVar(&cert, "cert", "", "TLS: client certificate for mutual TLS (with --key)")
	gfs.StringVar(&keyArg, "key", "", "TLS: key of the --cert client certificate")
	if err := gfs.Parse(args); err != nil {
		return err
	}
	sec, err := parseSecurity(user, cacert, cert, keyArg)
	if err != nil {
		return err
	}
	if token != "" {
		if user != "" {
			return errors.New("--token and --user exclude each other")
		}
		sec.token = token
	}
	o.sec = sec
	totalSet := false
	gfs.Visit(func(f *flag.Flag) { totalSet = totalSet || f.Name == "total" })
	if o.duration > 0 && !totalSet {
		o.total = 0
	}
	for _, ep := range strings.Split(endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			o.endpoints = append(o.endpoints, ep)
		}
	}

	rest := gfs.Args()
	if len(rest) == 0 {
		gfs.Usage()
		return errors.New("missing command: put, range, txn, watch or auth")
	}
	name, cmdArgs := rest[0], rest[1:]
	if name == "watch" {
		return runWatch(ctx, o, cmdArgs, asJSON, stdout, stderr)
	}
	w, err := parseWorkload(name, cmdArgs, o.sec, stderr)
	if err != nil {
		return err
	}
	s, err := bench(ctx, o, name, w)
	if err != nil {
		return err
	}
	if asJSON {
		err = s.writeJSON(stdout)
	} else {
		err = s.writeText(stdout)
	}
	if err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	if s.Errors > 0 {
		return errRequestsFailed
	}
	return nil
}

func addKeyFlags(fs *flag.FlagSet, o *keyOptions) {
	fs.IntVar(&o.keySize, "key-size", 8, "key size in bytes")
	fs.IntVar(&o.valSize, "val-size", 256, "value size in bytes")
	fs.IntVar(&o.keySpace, "key-space-size", 10000, "number of distinct keys written")
	fs.BoolVar(&o.sequential, "sequential-keys", false, "write keys in order instead of at random")
	fs.StringVar(&o.prefix, "key-prefix", "", "put every key under this prefix (before the --key-size digits)")
}

func parseWorkload(name string, args []string, sec security, stderr io.Writer) (workload, error) {
	fs := flag.NewFlagSet("bench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		ko    keyOptions
		ops   int
		rw    rangeWorkload
		consi string
	)
	switch name {
	case "put":
		addKeyFlags(fs, &ko)
	case "txn":
		addKeyFlags(fs, &ko)
		fs.IntVar(&ops, "txn-ops", 1, "compare-and-put pairs per txn, on distinct keys")
	case "range":
		fs.StringVar(&rw.key, "key", "", "range over this single key")
		fs.StringVar(&rw.prefix, "prefix", "", "range over every key with this prefix")
		fs.IntVar(&rw.preload, "preload", 0, "before measuring, put this many keys under --prefix (with --key: put the key)")
		fs.IntVar(&rw.valSize, "val-size", 256, "value size in bytes of the preloaded keys")
		fs.StringVar(&consi, "consistency", "l", "l (linearizable) or s (serializable)")
		fs.Int64Var(&rw.limit, "limit", 0, "most keys per response (0: all)")
	case "auth":
	default:
		return nil, fmt.Errorf("unknown command %q: want put, range, txn, watch or auth", name)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s: unexpected arguments %q", name, fs.Args())
	}
	switch name {
	case "put":
		return newPutWorkload(ko)
	case "txn":
		return newTxnWorkload(ko, ops)
	case "auth":
		if sec.user == nil {
			return nil, errors.New("auth: needs --user name:password (the user to log in as)")
		}
		return &authWorkload{user: sec.user}, nil
	}
	switch consi {
	case "l":
	case "s":
		rw.serializable = true
	default:
		return nil, fmt.Errorf("--consistency %q: want l or s", consi)
	}
	if err := rw.validate(); err != nil {
		return nil, err
	}
	return &rw, nil
}

func runWatch(ctx context.Context, g runOptions, args []string, asJSON bool, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench watch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := watchOptions{endpoints: g.endpoints, watchConns: g.conns, dialTimeout: g.dialTimeout, reqTimeout: g.requestTimeout, sec: g.sec}
	fs.IntVar(&o.watchers, "watchers", 1000, "watchers in total")
	fs.IntVar(&o.streams, "streams", 10, "watch streams carrying the watchers (over the global --conns connections)")
	fs.BoolVar(&o.shared, "shared-prefix", false, "every watcher watches one shared prefix (default: each its own key)")
	fs.IntVar(&o.puts, "puts", 1000, "puts, each on one watched key, after every watcher is created")
	fs.Float64Var(&o.putRate, "put-rate", 1000, "puts per second at most (0: unbounded)")
	fs.IntVar(&o.putClients, "put-clients", 10, "concurrent put loops")
	fs.IntVar(&o.putConns, "put-conns", 2, "connections of the put loops, apart from the watch connections")
	fs.IntVar(&o.valSize, "val-size", 64, "value size in bytes (at least 16: the stamp)")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "bound of the whole run; events missing by then are reported")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("watch: unexpected arguments %q", fs.Args())
	}
	r, err := benchWatch(ctx, o)
	if err != nil {
		return err
	}
	if asJSON {
		err = r.writeJSON(stdout)
	} else {
		err = r.writeText(stdout)
	}
	if err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	if !r.ok() {
		return errRequestsFailed
	}
	return nil
}

// parseSecurity reads --user, --cacert, --cert and --key; all empty is the
// zero security, plaintext and anonymous.
func parseSecurity(user, cacert, cert, key string) (security, error) {
	var sec security
	cfg, err := tlsConfig(cacert, cert, key)
	if err != nil {
		return sec, err
	}
	sec.tls, sec.mtls = cfg, cert != ""
	if user != "" {
		if sec.user, err = parseUser(user); err != nil {
			return sec, err
		}
		sec.reauths = new(atomic.Int64)
	}
	return sec, nil
}
