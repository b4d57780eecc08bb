package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluicehq/sluice/client"
	"github.com/sluicehq/sluice/overrides"
)

const overridesUsage = `usage:
  sluice overrides set    --server URL [--token T] POLICY KEY (--plan PLAN | --limits JSON) [--ttl D] [--reason TEXT]
  sluice overrides get    --server URL [--token T] POLICY KEY
  sluice overrides delete --server URL [--token T] POLICY KEY
  sluice overrides list   --server URL [--token T] --policy P [--prefix K] [--limit N] [--page-token T] [--all]

Sets, reads, deletes and lists the per-key overrides of a running sluice serve (docs/overrides.md),
printing each override as one line of JSON. The token (of scope admin) is --token, or SLUICE_TOKEN.
--limits is a JSON array of limits, such as '[{"strategy":"gcra","limit":10,"periodMs":1000,"burst":5}]'.

`

// runOverrides runs `sluice overrides`: exit 0 success, 1 the server refused or failed, 2 bad
// usage.
func runOverrides(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(stderr, overridesUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub := args[0]
	name := "sluice overrides " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, overridesUsage)
		fs.PrintDefaults()
	}
	server := fs.String("server", "", "`URL` of the sluice serve HTTP API, such as http://127.0.0.1:8080")
	token := fs.String("token", "", "bearer `token` of scope admin (default $SLUICE_TOKEN)")
	var (
		plan, limits, reason, policy, prefix, pageToken string
		ttl                                             time.Duration
		limit                                           int
		all                                             bool
	)
	positional := 2 // POLICY KEY
	switch sub {
	case "set":
		fs.StringVar(&plan, "plan", "", "the `plan` of the policy the key moves to")
		fs.StringVar(&limits, "limits", "", "limits of the key's own, a JSON array")
		fs.DurationVar(&ttl, "ttl", 0, "how long the override lasts, such as 72h (0: until deleted)")
		fs.StringVar(&reason, "reason", "", "why, for the people reading it")
	case "get", "delete":
	case "list":
		positional = 0
		fs.StringVar(&policy, "policy", "", "the `policy` whose overrides to list (required)")
		fs.StringVar(&prefix, "prefix", "", "list only keys starting with `K`")
		fs.IntVar(&limit, "limit", 0, "overrides per page, 1 to 1000 (0: the server's default, 100)")
		fs.StringVar(&pageToken, "page-token", "", "the page after a list's `token`")
		fs.BoolVar(&all, "all", false, "follow the page tokens to the last page")
	default:
		fmt.Fprintf(stderr, "sluice overrides: unknown subcommand %q\n\n%s", sub, overridesUsage)
		return 2
	}
	rest, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", name, fmt.Sprintf(format, args...))
		return 2
	}
	switch {
	case len(rest) != positional && positional == 0:
		return bad("unexpected arguments %q (the policy is --policy)", rest)
	case len(rest) != positional:
		return bad("want POLICY KEY, got %d arguments", len(rest))
	case *server == "":
		return bad("--server is required")
	case sub == "set" && (plan == "") == (limits == ""):
		return bad("set one of --plan and --limits")
	case ttl < 0:
		return bad("--ttl must be positive, got %v", ttl)
	case sub == "list" && policy == "":
		return bad("--policy is required")
	case limit < 0 || limit > 1000:
		return bad("--limit must be 1 to 1000, got %d", limit)
	}
	if *token == "" {
		*token = os.Getenv("SLUICE_TOKEN") // not the flag's default, which -h would print
	}
	o := overrides.Override{Plan: plan, Reason: reason}
	if len(rest) == 2 {
		o.Policy, o.Key = rest[0], rest[1]
	}
	if limits != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(limits)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o.Limits); err != nil {
			return bad("--limits must be a JSON array of limits: %v", err)
		}
		if dec.More() {
			return bad("--limits must be one JSON array, with nothing after it")
		}
	}
	c, err := client.New(*server, client.Options{Token: *token, Timeout: 10 * time.Second})
	if err != nil {
		return bad("--server: %v", err)
	}
	defer c.Close()

	emit := func(o overrides.Override) error {
		b, err := overrides.EncodeOverride(o)
		if err == nil {
			_, err = fmt.Fprintf(stdout, "%s\n", b)
		}
		return err
	}
	switch sub {
	case "set":
		if o, err = c.SetOverride(ctx, o, ttl); err == nil {
			err = emit(o)
		}
	case "get":
		if o, err = c.GetOverride(ctx, o.Policy, o.Key); err == nil {
			err = emit(o)
		}
	case "delete":
		var deleted bool
		if deleted, err = c.DeleteOverride(ctx, o.Policy, o.Key); err == nil {
			fmt.Fprintf(stdout, "{\"deleted\":%t}\n", deleted)
		}
	case "list":
		for {
			var page []overrides.Override
			page, pageToken, err = c.ListOverrides(ctx, policy, prefix, pageToken, limit)
			for _, o := range page {
				if err == nil {
					err = emit(o)
				}
			}
			if err != nil || pageToken == "" {
				break
			}
			if !all {
				fmt.Fprintf(stderr, "more: --page-token %s\n", pageToken)
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
