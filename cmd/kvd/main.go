// Command kvd runs one member of a kvd cluster: an etcd v3 API compatible,
// replicated key-value store. With no flags it starts a single member on
// 127.0.0.1:2379 with its data in ./default.kvd.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/datadir"
	"github.com/kvd-dev/kvd/pkg/server"
)

// version is kvd's own version; the etcd API version it speaks is
// server.Version.
var version = "0.1.0-dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "plugins" {
		return runPlugins(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "snapshot" {
		return runSnapshot(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "migrate" {
		return runMigrate(args[1:], os.Stdout, os.Stderr)
	}
	cfg, err := config.Parse(args)
	switch {
	case errors.Is(err, config.ErrVersion):
		fmt.Printf("kvd Version: %s\netcd API Version: %s\nGo Version: %s\nGo OS/Arch: %s/%s\n",
			version, server.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case errors.Is(err, flag.ErrHelp):
		config.Usage(os.Stdout)
		return 0
	case err != nil:
		fmt.Fprintf(os.Stderr, "kvd: %v\n", err)
		return 2
	}
	lg, err := newLogger(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvd: %v\n", err)
		return 2
	}
	defer func() { _ = lg.Sync() }()

	// The member holds its data dir for as long as it runs, so that kvd
	// migrate, kvd snapshot restore and a second member are refused.
	lock, err := datadir.Acquire(cfg.DataDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kvd: %v\n", err)
		return 1
	}
	defer func() { _ = lock.Release() }()

	app := fx.New(
		fx.Supply(cfg, lg),
		fx.WithLogger(func() fxevent.Logger {
			return &fxevent.ZapLogger{Logger: lg.Named("fx").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))}
		}),
		fx.StopTimeout(15*time.Second),
		server.Module(),
	)
	startCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		lg.Error("kvd failed to start", zap.Error(err))
		fmt.Fprintf(os.Stderr, "kvd: %v\n", err)
		return 1
	}
	lg.Info("kvd started", zap.String("name", cfg.Name), zap.String("data-dir", cfg.DataDir), zap.String("backend", cfg.Backend.Engine))
	// Stop cleanly on SIGTERM/SIGINT, or when an actor failure asks fx to
	// shut down (exit code 1).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	exitCode := 0
	select {
	case s := <-sigs:
		lg.Info("kvd stopping", zap.Stringer("signal", s))
	case sig := <-app.Wait():
		exitCode = sig.ExitCode
	}
	signal.Stop(sigs)
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := app.Stop(stopCtx); err != nil {
		lg.Error("kvd stop", zap.Error(err))
		if exitCode == 0 {
			return 1
		}
	}
	lg.Info("kvd stopped", zap.Int("exit-code", exitCode))
	return exitCode
}
