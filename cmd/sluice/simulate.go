package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/regionsim"
	"github.com/sluicehq/sluice/region"
)

const simulateUsage = `usage: sluice simulate regions --limit N --demand REGION=N[,REGION=N...] [--floor F] [--plot FILE.svg|FILE.html]

Splits a global limit of N requests per interval across regions two ways and compares them: evenly,
and rebalanced by demand (demand is met in full when it fits in the limit, else in proportion; what
it leaves raises quiet regions to an even base of floor*limit, and the rest is spread evenly; see
docs/regions.md). It prints one line per region, in the order given:

  REGION even=SHARE rebalanced=SHARE

and last how much of the demand each split serves:

  served: even=N rebalanced=N

--plot also replays an hour, a minute at a time, with the limit per minute: the demand given holds
for the first quarter hour, moves in a straight line over the middle half hour to the next region
in the order given (the last region's to the first), and holds there for the last quarter hour.
Shares are rebalanced every minute from the minute before. The picture (an SVG of 1000x660, to
open in a browser) has two panels over the minutes 0 to 59.
Top: each region in its own color (the colored boxes of the legend), its demand thick and pale,
its rebalanced share solid over it, the shortfall between them shaded, and the even share gray
and dashed. Bottom, for all regions: the demand capped at the limit (black), served by the even
split (gray, dashed) and by the rebalanced shares (green), what those left unserved shaded red;
the legend ends with the hour's totals. A FILE ending in .html is a page holding the same picture,
the hour's totals and a table per region, fetching nothing else; any other extension is refused.

Region names hold letters, digits and "._-" (at most 64 bytes); demand values and the limit are
whole numbers up to 2^53.

`

// runSimulate runs a simulation: exit 0 on success, 2 on bad usage or when the plot cannot be
// written.
func runSimulate(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, simulateUsage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, simulateUsage)
		return 0
	case "regions":
	default:
		fmt.Fprintf(stderr, "sluice simulate: unknown simulation %q; there is one: regions\n\n%s", args[0], simulateUsage)
		return 2
	}
	fs := flag.NewFlagSet("sluice simulate regions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage)
		fs.PrintDefaults()
	}
	limit := fs.Int64("limit", 0, "the global limit `N`, requests per interval (per minute in the plot); required")
	demandFlag := fs.String("demand", "", "each region's demand per interval, `REGION=N,...`; required")
	floor := fs.Float64("floor", region.DefaultFloor, "fraction `F` of the limit held evenly for quiet regions out of what demand leaves, from 0 (none) to below 1")
	plot := fs.String("plot", "", "write an hour's simulation to `FILE`, an SVG (FILE.svg) or an HTML page (FILE.html)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "sluice simulate regions: "+format+"\n", args...)
		return 2
	}
	var err error
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case !set["limit"]:
		return fail("--limit is required")
	case *limit < 1 || *limit > 1<<53:
		return fail("--limit: must be from 1 to 2^53, got %d", *limit)
	case !set["demand"]:
		return fail("--demand is required, e.g. --demand mumbai=600,frankfurt=200,virginia=100")
	case !(*floor >= 0 && *floor < 1):
		return fail("--floor: must be at least 0 and below 1, got %v", *floor)
	}
	var write func(*regionsim.Simulation, io.Writer) error
	if *plot != "" {
		if write, err = plotWriter(*plot); err != nil {
			return fail("--plot: %v", err)
		}
	}
	regions, demand, err := parseDemand(*demandFlag)
	if err != nil {
		return fail("--demand: %v", err)
	}

	even, err := region.Even(*limit, regions)
	if err != nil {
		return fail("%s", flagError(err))
	}
	rebalanced, err := region.Rebalance(*limit, demand, *floor)
	if err != nil {
		return fail("%s", flagError(err))
	}
	if *plot != "" {
		sim, err := regionsim.Simulate(regionsim.Config{Limit: *limit, Regions: regions, Demand: demand, Floor: *floor})
		if err != nil {
			return fail("%s", flagError(err))
		}
		if err := writePlot(*plot, sim, write); err != nil {
			return fail("--plot: %v", err)
		}
		t := sim.Totals()
		fmt.Fprintf(stderr, "sluice simulate regions: wrote %s: over the hour the even split served %d and the rebalanced shares %d of %d servable\n",
			*plot, t.Even, t.Rebalanced, t.Servable)
	}
	for _, r := range regions {
		fmt.Fprintf(stdout, "%s even=%d rebalanced=%d\n", r, even[r], rebalanced[r])
	}
	fmt.Fprintf(stdout, "served: even=%d rebalanced=%d\n", region.Served(even, demand), region.Served(rebalanced, demand))
	return 0
}

// flagError words a *sluice.InvalidError from package region after the flag that fed the field.
func flagError(err error) string {
	var inv *sluice.InvalidError
	if !errors.As(err, &inv) {
		return err.Error()
	}
	name := inv.Field
	switch {
	case name == "limit" || name == "floor":
		name = "--" + name
	case strings.HasPrefix(name, "demand"), strings.HasPrefix(name, "regions"):
		name = "--demand"
	}
	return name + ": " + inv.Reason
}

// plotWriter picks the plot's format by the file's extension, and refuses any other, so that a
// .png never holds an SVG.
func plotWriter(path string) (func(*regionsim.Simulation, io.Writer) error, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		return (*regionsim.Simulation).WriteSVG, nil
	case ".html":
		return (*regionsim.Simulation).WriteHTML, nil
	case "":
		return nil, fmt.Errorf("%q has no extension; want .svg or .html", path)
	default:
		return nil, fmt.Errorf("cannot write %s: the plot is an SVG or an HTML page, want FILE.svg or FILE.html", ext)
	}
}

func writePlot(path string, sim *regionsim.Simulation, write func(*regionsim.Simulation, io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(sim, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parseDemand parses --demand: REGION=N pairs separated by commas, spaces around either allowed.
// It returns the regions in the order given and their demand.
func parseDemand(s string) ([]string, map[string]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil, errors.New("no regions; want REGION=N[,REGION=N...]")
	}
	items := strings.Split(s, ",")
	if len(items) > regionsim.MaxRegions {
		return nil, nil, fmt.Errorf("at most %d regions, got %d", regionsim.MaxRegions, len(items))
	}
	regions := make([]string, 0, len(items))
	demand := make(map[string]int64, len(items))
	var total int64
	for i, item := range items {
		name, val, ok := strings.Cut(item, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok {
			return nil, nil, fmt.Errorf("item %d (%q) is not REGION=N", i+1, item)
		}
		if err := regionsim.CheckRegionName(name); err != nil {
			return nil, nil, fmt.Errorf("item %d: %v", i+1, err)
		}
		if _, dup := demand[name]; dup {
			return nil, nil, fmt.Errorf("region %q is given twice", name)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 || n > 1<<53 {
			return nil, nil, fmt.Errorf("region %s: demand must be a whole number from 0 to 2^53, got %q", name, val)
		}
		if total += n; total > 1<<53 {
			return nil, nil, errors.New("the total demand must be at most 2^53")
		}
		regions = append(regions, name)
		demand[name] = n
	}
	return regions, demand, nil
}
