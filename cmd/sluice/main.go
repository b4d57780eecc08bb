// Command sluice is sluice's command-line tool.
//
//	sluice serve [--config FILE] [--http ADDR] [--grpc ADDR] [--store URL] [--require-store] ...
//	sluice validate --config FILE [--store URL]
//	sluice conformance [--vectors FILE ...] [--store URL] [FILE ...]   (flags anywhere)
//	sluice overrides set|get|list|delete --server URL [--token T] ...
//	sluice version
//	sluice help
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/conformance"
)

const usage = `usage: sluice <command> [arguments]

commands:
  serve        run the rate-limit service (HTTP JSON, gRPC, Envoy's rate-limit API)
  bench        drive a running sluice serve with load over gRPC or HTTP and summarize
  validate     check a config file
  conformance  replay conformance vector files against a store
  simulate     compare splitting a global limit across regions evenly and by demand
  overrides    set, get, list and delete the per-key overrides of a running sluice serve
  version      print the sluice and Go versions
  help         print this help

Run "sluice <command> -h" for its flags.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes the command line args and returns the exit code: 0 success, 1 a check failed,
// 2 bad usage or an error that stopped the command.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runServe(ctx, args[1:], stdout, stderr)
	case "bench":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runBench(ctx, args[1:], stdout, stderr)
	case "validate":
		return runValidate(args[1:], stdout, stderr)
	case "conformance":
		return runConformance(args[1:], stdout, stderr)
	case "simulate":
		return runSimulate(args[1:], stdout, stderr)
	case "overrides":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runOverrides(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "sluice %s %s\n", moduleVersion(), runtime.Version())
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// fileList collects a repeatable string flag.
type fileList []string

func (l *fileList) String() string     { return strings.Join(*l, ",") }
func (l *fileList) Set(v string) error { *l = append(*l, v); return nil }

// parseInterspersed parses fs's flags wherever they stand among args (the flag package stops at
// the first non-flag) and returns the other arguments in order; after "--" all are arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

func runConformance(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: sluice conformance [--store URL] [--vectors FILE ...] [FILE ...]\n\n"+
			"Replays vector files against a store. Without files, it replays the vectors built into sluice.\n\n")
		fs.PrintDefaults()
	}
	var paths fileList
	fs.Var(&paths, "vectors", "vector `FILE` to replay; repeatable, and files may also follow the flags (none: the built-in vectors)")
	storeURL := fs.String("store", "memory", "store `URL` to check against: "+supportedStores)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	paths = append(paths, rest...)

	// Parse every file before touching the store, so a bad file costs nothing.
	var files []conformance.Named
	if len(paths) == 0 {
		if files, err = conformance.Builtin(); err != nil {
			fmt.Fprintf(stderr, "sluice conformance: %v\n", err)
			return 2
		}
	}
	for _, path := range paths {
		f, err := conformance.ReadFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "sluice conformance: %v\n", err)
			return 2
		}
		files = append(files, conformance.Named{Name: path, File: f})
	}

	store, closer, err := openStore(*storeURL)
	if err != nil {
		fmt.Fprintf(stderr, "sluice conformance: %v\n", err)
		return 2
	}
	defer closer.Close()

	// Runs share policy names, so each file gets its own namespace, and the random run ID keeps a
	// shared store's leftovers from earlier runs out.
	runID := rand.Text()[:12]
	var passed, failed int
	for i, vf := range files {
		ns := fmt.Sprintf("conformance:%s:%d:", runID, i)
		res, err := conformance.Run(context.Background(), store, vf.File, ns)
		if err != nil {
			fmt.Fprintf(stderr, "sluice conformance: %s: %v\n", vf.Name, err)
			return 2
		}
		for _, f := range res.Failures {
			fmt.Fprintf(stdout, "%s: %s\n", vf.Name, f)
		}
		passed += res.Passed
		failed += res.Failed
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}
