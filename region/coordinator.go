package region

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// Config configures a Coordinator. Every region of one global limit must use the same Name,
// Regions, Limit, IntervalMs and Floor, with only Region its own: the shares a rebalance writes
// sum to the limit of the region that computed them, and before the first rebalance each region
// starts from the even split of its own list.
type Config struct {
	// Schema holds the coordinator's tables. Empty means "sluice_region".
	Schema string
	// Name is the global limit's name, so that one schema can coordinate several.
	Name string
	// Region is this region's name, one of Regions.
	Region string
	// Regions lists every region that shares the limit.
	Regions []string
	// Limit is the global limit per interval.
	Limit int64
	// IntervalMs is the rebalance interval in milliseconds. Shares change at its boundaries
	// (multiples of IntervalMs since the epoch), and a region enforces its share over fixed
	// windows of the same length (see Policy), so windows and shares change together.
	IntervalMs int64
	// Floor is Rebalance's floor, from 0 to below 1: the fraction of the limit held evenly for
	// quiet regions, out of what demand leaves unused. 0, the zero value, reserves nothing;
	// region.DefaultFloor is what sluice simulate regions uses.
	Floor float64
}

// maxRegions and maxDemand bound what a rebalance sums, so the total demand fits in an int64.
const (
	maxRegions = 1024
	maxDemand  = 1 << 53
)

// maxInstant bounds the instants a Coordinator accepts, so that interval arithmetic cannot
// overflow (2^53 ms is some 285,000 years).
const maxInstant = 1 << 53

// Coordinator is one region's end of a global limit split across regions through PostgreSQL.
// Each interval, every region reports the demand it observed (Report), one region rebalances
// (Rebalance: any may call it, and the first call per interval does the work), and every region
// reads its share for the next interval (Share) and enforces it locally (Policy). Nothing in it
// reads a clock: every instant is passed in, in epoch milliseconds.
//
// If the database cannot be reached, Share returns the share it read last, so the region goes on
// enforcing it; the shares then stay as they were, still summing to at most the limit, until the
// database is back. A Coordinator is safe for concurrent use. It does not own the pool.
type Coordinator struct {
	pool  *pgxpool.Pool
	cfg   Config // with its defaults applied
	q     string // the schema, quoted
	floor float64
	even  int64        // this region's share before any rebalance
	last  atomic.Int64 // the share Share read last
}

// New returns a Coordinator on pool, migrating the schema first (for at most a minute). A bad
// Config is a *sluice.InvalidError naming the field.
func New(pool *pgxpool.Pool, cfg Config) (*Coordinator, error) {
	if cfg.Schema == "" {
		cfg.Schema = "sluice_region"
	}
	if cfg.Name == "" {
		return nil, invalid("name", "the global limit needs a name")
	}
	if cfg.IntervalMs < 1 || cfg.IntervalMs > maxInstant {
		return nil, invalid("intervalMs", "must be from 1 to 2^53, got %d", cfg.IntervalMs)
	}
	if err := checkFloor(cfg.Floor); err != nil {
		return nil, err
	}
	if len(cfg.Regions) > maxRegions {
		return nil, invalid("regions", "at most %d regions, got %d", maxRegions, len(cfg.Regions))
	}
	even, err := Even(cfg.Limit, cfg.Regions)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(cfg.Regions, cfg.Region) {
		return nil, invalid("region", "%q is not one of regions %q", cfg.Region, cfg.Regions)
	}
	cfg.Regions = slices.Clone(cfg.Regions)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Apply(ctx, pool, cfg.Schema); err != nil {
		return nil, err
	}
	c := &Coordinator{pool: pool, cfg: cfg, q: pgx.Identifier{cfg.Schema}.Sanitize(), floor: cfg.Floor, even: even[cfg.Region]}
	c.last.Store(c.even)
	return c, nil
}

// Report records the demand this region observed over the interval that ended at now: every
// request it was asked to admit for the limit, admitted or refused. Counting only the admitted
// ones would hide demand beyond the share, and the share would never grow. A report older than
// the one stored is ignored; a report more than two intervals old counts for nothing (see
// Rebalance).
func (c *Coordinator) Report(ctx context.Context, now, demand int64) error {
	if err := checkInstant("now", now); err != nil {
		return err
	}
	if demand < 0 || demand > maxDemand {
		return invalid("demand", "must be from 0 to 2^53, got %d", demand)
	}
	_, err := c.pool.Exec(ctx, "INSERT INTO "+c.q+".demand AS d (name, region, demand, at) VALUES ($1, $2, $3, $4)"+
		" ON CONFLICT (name, region) DO UPDATE SET demand = excluded.demand, at = excluded.at WHERE d.at <= excluded.at",
		c.cfg.Name, c.cfg.Region, demand, now)
	return unavailable(err)
}

// Rebalance computes every region's share from the demand reported in the last two intervals
// before now and writes the shares, in one transaction, to take effect at the first interval
// boundary after now. A region without such a report may be cut off from the database, still
// enforcing the last share it read: it keeps its share, and the others split what is left (see
// split), so the shares in force never sum to more than the limit, whoever is cut off. Its
// capacity stays with it until it reports again. It reports whether this call computed them: for each
// boundary only the first call does, holding the limit's row lock meanwhile, and later calls,
// from any region, return false.
//
// Shares take effect at a boundary, not at once, so that every region switches at the same
// instant, together with its fixed window: within any window all regions enforce shares from
// one rebalance, which sum to at most the limit. Run it shortly before the boundary, after the
// regions have reported: demand observed in one interval then shapes the next one.
func (c *Coordinator) Rebalance(ctx context.Context, now int64) (bool, error) {
	if err := checkInstant("now", now); err != nil {
		return false, err
	}
	interval := c.cfg.IntervalMs
	effective := (now/interval + 1) * interval
	computed := false
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+c.q+".rounds (name, effective_at, computed_at, computed_by)"+
			" VALUES ($1, 0, 0, '') ON CONFLICT (name) DO NOTHING", c.cfg.Name); err != nil {
			return err
		}
		var done int64
		if err := tx.QueryRow(ctx, "SELECT effective_at FROM "+c.q+".rounds WHERE name = $1 FOR UPDATE", c.cfg.Name).Scan(&done); err != nil {
			return err
		}
		if done >= effective {
			return nil
		}
		demand := make(map[string]int64, len(c.cfg.Regions))
		for _, r := range c.cfg.Regions {
			demand[r] = 0
		}
		rows, err := tx.Query(ctx, "SELECT region, demand FROM "+c.q+".demand WHERE name = $1 AND at > $2", c.cfg.Name, now-2*interval)
		if err != nil {
			return err
		}
		var region string
		var d int64
		if _, err := pgx.ForEachRow(rows, []any{&region, &d}, func() error {
			if _, ok := demand[region]; ok { // a region outside the list takes no part
				demand[region] = d
			}
			return nil
		}); err != nil {
			return err
		}
		fresh := map[string]bool{}
		rows, err = tx.Query(ctx, "SELECT region FROM "+c.q+".demand WHERE name = $1 AND at > $2", c.cfg.Name, now-2*interval)
		if err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(rows, []any{&region}, func() error {
			fresh[region] = true
			return nil
		}); err != nil {
			return err
		}
		shares, err := c.split(ctx, tx, demand, fresh)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(shares))
		vals, used := make([]int64, 0, len(shares)), make([]int64, 0, len(shares))
		for _, r := range slices.Sorted(slices.Values(c.cfg.Regions)) {
			names, vals, used = append(names, r), append(vals, shares[r]), append(used, demand[r])
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+c.q+".shares (name, region, effective_at, share, demand)"+
			" SELECT $1, r, $2, s, d FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS u(r, s, d)"+
			" ON CONFLICT (name, region, effective_at) DO UPDATE SET share = excluded.share, demand = excluded.demand",
			c.cfg.Name, effective, names, vals, used); err != nil {
			return err
		}
		// Keep the shares in force an interval ago and since, for a region whose clock lags.
		if _, err := tx.Exec(ctx, "DELETE FROM "+c.q+".shares WHERE name = $1 AND effective_at <"+
			" (SELECT coalesce(max(effective_at), 0) FROM "+c.q+".shares WHERE name = $1 AND effective_at <= $2)",
			c.cfg.Name, now-interval); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE "+c.q+".rounds SET effective_at = $2, computed_at = $3, computed_by = $4 WHERE name = $1",
			c.cfg.Name, effective, now, c.cfg.Region); err != nil {
			return err
		}
		computed = true
		return nil
	})
	if err != nil {
		return false, unavailable(err)
	}
	return computed, nil
}

// split is the rebalance. A region without a fresh report keeps its share of the latest round
// (the even share before any), which it enforces if it read it; the others divide by Rebalance
// what is left after the larger of that and its share of the round before, which it enforces if
// it did not. So the new round sums to at most the limit, and so do the shares the regions
// actually enforce, whichever round each of them read last.
func (c *Coordinator) split(ctx context.Context, tx pgx.Tx, demand map[string]int64, fresh map[string]bool) (map[string]int64, error) {
	even, err := Even(c.cfg.Limit, c.cfg.Regions)
	if err != nil {
		return nil, err
	}
	// The two latest rounds stored: latest[r] and before[r].
	latest, before := map[string]int64{}, map[string]int64{}
	rows, err := tx.Query(ctx, "SELECT region, share, rank() OVER (PARTITION BY region ORDER BY effective_at DESC) AS k FROM "+
		c.q+".shares WHERE name = $1", c.cfg.Name)
	if err != nil {
		return nil, err
	}
	var region string
	var share, rank int64
	if _, err := pgx.ForEachRow(rows, []any{&region, &share, &rank}, func() error {
		switch rank {
		case 1:
			latest[region] = share
		case 2:
			before[region] = share
		}
		return nil
	}); err != nil {
		return nil, err
	}
	shares := make(map[string]int64, len(demand))
	rest := c.cfg.Limit
	reporting := map[string]int64{}
	for r, d := range demand {
		if fresh[r] {
			reporting[r] = d
			continue
		}
		s, ok := latest[r]
		if !ok {
			s = even[r]
		}
		shares[r] = s
		if b, ok := before[r]; ok {
			s = max(s, b)
		}
		rest -= s
	}
	if len(reporting) == 0 {
		return shares, nil
	}
	if rest < 1 {
		for r := range reporting {
			shares[r] = 0
		}
		return shares, nil
	}
	split, err := Rebalance(rest, reporting, c.floor)
	if err != nil {
		return nil, err
	}
	for r, s := range split {
		shares[r] = s
	}
	return shares, nil
}

// Share returns this region's share of the limit at the instant at: the share of the latest
// rebalance that took effect at or before it, or the even split's share before any has. Asked
// for an instant just ahead (the next boundary, after the rebalance), it is the share to install
// when that boundary comes.
//
// When the database cannot answer, Share returns the share it read last (the even share if it
// never read one) together with the error, so the region keeps enforcing what it had.
func (c *Coordinator) Share(ctx context.Context, at int64) (int64, error) {
	if err := checkInstant("at", at); err != nil {
		return c.last.Load(), err
	}
	var share int64
	err := c.pool.QueryRow(ctx, "SELECT share FROM "+c.q+".shares WHERE name = $1 AND region = $2 AND effective_at <= $3"+
		" ORDER BY effective_at DESC LIMIT 1", c.cfg.Name, c.cfg.Region, at).Scan(&share)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		share = c.even
	case err != nil:
		return c.last.Load(), unavailable(err)
	}
	c.last.Store(share)
	return share, nil
}

// Policy is the policy with which a region enforces its share: a fixed window of windowMs (the
// rebalance interval, so that windows turn over when shares change) admitting share. Install it
// with sluice.Limiter.SetPolicies at each boundary: an unchanged share is an Equal policy, which
// keeps its state and counts, and a changed one starts afresh, as the new window does anyway.
//
// A share below 1 has no policy (a fixed window admits at least 1): it is an *sluice.InvalidError
// naming "share", and the region should refuse every request for the limit until its share
// grows. A share is 0 when the other regions' demand fills the limit (the floor takes only from
// what demand leaves unused), or with a limit below one per region.
func Policy(name string, share, windowMs int64) (*sluice.Policy, error) {
	if share < 1 {
		return nil, invalid("share", "a share of %d admits nothing: refuse without checking", share)
	}
	return sluice.NewPolicy(name, sluice.Limit{Strategy: sluice.FixedWindow{Limit: float64(share), WindowMs: float64(windowMs)}})
}

func checkInstant(field string, t int64) error {
	if t < 1 || t > maxInstant {
		return invalid(field, "must be an instant in epoch ms from 1 to 2^53, got %d", t)
	}
	return nil
}

// unavailable marks a database failure as sluice.ErrUnavailable, keeping the cause.
func unavailable(err error) error { return storeerr.Unavailable("region coordinator", err) }
