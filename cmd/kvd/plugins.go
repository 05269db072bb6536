package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/pluginhost"
	"github.com/kvd-dev/kvd/pkg/server"
)

// runPlugins is `kvd plugins check --config FILE`: it starts each auth
// plugin of the config, performs the handshake, prints each one's name,
// kind, protocol version, PID and health, and stops them. Exit status 0
// when all are healthy.
func runPlugins(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: kvd plugins check --config FILE")
		return 2
	}
	fs := flag.NewFlagSet("kvd plugins check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the kvd config file whose auth-plugins to check")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: kvd plugins check --config FILE")
		return 2
	}
	cfg, err := config.Load(*path)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvd: %v\n", err)
		return 2
	}
	if len(cfg.AuthPlugins) == 0 {
		fmt.Fprintf(stdout, "%s configures no auth-plugins\n", *path)
		return 0
	}
	// The plugins' warnings and errors go to stderr, beside the table.
	lc := *cfg
	lc.LogLevel, lc.LogOutputs = "warn", []string{"stderr"}
	lg, err := newLogger(&lc)
	if err != nil {
		fmt.Fprintf(stderr, "kvd: %v\n", err)
		return 1
	}
	defer func() { _ = lg.Sync() }()
	h, err := pluginhost.Start(server.PluginSpecs(cfg), pluginhost.Options{Logger: lg})
	if err != nil {
		fmt.Fprintf(stderr, "kvd: %v\n", err)
		return 1
	}
	defer h.Close()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tPROTOCOL\tPID\tHEALTH")
	code := 0
	for _, st := range h.Status() {
		health := "ok"
		if st.Err != nil {
			health, code = st.Err.Error(), 1
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", st.Name, st.Kind, st.ProtocolVersion, st.PID, health)
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	return code
}
