package region_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/store/memory"
)

// regionServer is one region: a limiter over its own memory store, behind its own HTTP server,
// with its own connections to the coordinating database. It counts every request it is asked
// to admit, which is the demand it reports.
type regionServer struct {
	name     string
	pool     *pgxpool.Pool
	coord    *region.Coordinator
	lim      *sluice.Limiter
	srv      *httptest.Server
	attempts atomic.Int64
	share    int64 // the share installed, set between intervals
}

const globalPolicy = "partner-global"

func (rs *regionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now, err := strconv.ParseInt(r.URL.Query().Get("now"), 10, 64)
	if err != nil {
		http.Error(w, "now: "+err.Error(), http.StatusBadRequest)
		return
	}
	rs.attempts.Add(1)
	d, err := rs.lim.Check(sluice.WithNow(r.Context(), now), globalPolicy, "partner", 1)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	case d.Allowed:
		w.WriteHeader(http.StatusOK)
	default:
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// install reads the share in force at boundary and makes it the region's policy.
func (rs *regionServer) install(t *testing.T, boundary int64) error {
	share, err := rs.coord.Share(context.Background(), boundary)
	rs.share = share // on an error, the last share read: the region keeps enforcing it
	p, perr := region.Policy(globalPolicy, share, minute)
	if perr != nil {
		t.Fatal(perr)
	}
	if perr := rs.lim.SetPolicies(p); perr != nil {
		t.Fatal(perr)
	}
	return err
}

// send asks the region to admit n requests at instants spread over the first 80% of the
// interval starting at start, and returns how many it admitted.
func (rs *regionServer) send(t *testing.T, client *http.Client, start int64, n int64) int64 {
	var served int64
	for i := range n {
		now := start + 1 + i*(minute*8/10)/max(n, 1)
		resp, err := client.Get(fmt.Sprintf("%s/check?now=%d", rs.srv.URL, now))
		if err != nil {
			t.Error(err)
			return served
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			served++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("%s: status %d", rs.name, resp.StatusCode)
		}
	}
	return served
}

// TestRegionsEndToEnd runs three regions against a global limit of 900 per minute, each
// enforcing its share locally, coordinating through PostgreSQL, with explicit instants: one
// minute of even shares, a rebalance, a minute on the rebalanced shares, a shift of demand, and
// a minute with one region cut off from the database.
func TestRegionsEndToEnd(t *testing.T) {
	const limit = 900
	admin := pgtest.Pool(t)
	schema := pgtest.Schema(t, admin, "region_test")
	servers := make([]*regionServer, len(threeRegions))
	for i, name := range threeRegions {
		pool := pgtest.Pool(t) // a region's own connections, as a separate process would have
		coord, err := region.New(pool, region.Config{Schema: schema, Name: "partner", Region: name,
			Regions: threeRegions, Limit: limit, IntervalMs: minute})
		if err != nil {
			t.Fatal(err)
		}
		store := memory.New(memory.Config{})
		t.Cleanup(func() { store.Close() })
		lim, err := sluice.New(store)
		if err != nil {
			t.Fatal(err)
		}
		rs := &regionServer{name: name, pool: pool, coord: coord, lim: lim}
		rs.srv = httptest.NewServer(rs)
		t.Cleanup(rs.srv.Close)
		servers[i] = rs
	}
	if t.Failed() {
		return
	}
	client := &http.Client{}

	usual := []int64{600, 200, 100} // mumbai, frankfurt, virginia
	shifted := []int64{100, 600, 200}
	intervals := []struct {
		name    string
		demand  []int64
		cutOff  string // a region whose database connections are closed for this interval
		atLeast float64
	}{
		{name: "even shares, before any report", demand: usual},
		{name: "after one rebalance", demand: usual, atLeast: 0.95},
		{name: "demand shifted, shares from the minute before", demand: shifted},
		{name: "after the shift's rebalance", demand: shifted, atLeast: 0.95},
		{name: "virginia cut off from the database", demand: shifted, cutOff: "virginia", atLeast: 0.95},
	}
	for k, iv := range intervals {
		start := t0 + int64(k)*minute
		for _, rs := range servers {
			if rs.name == iv.cutOff {
				rs.pool.Close() // the database is unreachable from here on
			}
		}
		for _, rs := range servers {
			err := rs.install(t, start)
			if rs.name == iv.cutOff {
				if !errors.Is(err, sluice.ErrUnavailable) {
					t.Fatalf("%s: Share without a database: %v, want ErrUnavailable", rs.name, err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
		}

		// The interval's traffic, every region at once.
		served := make([]int64, len(servers))
		var wg sync.WaitGroup
		for i, rs := range servers {
			before := rs.attempts.Load()
			wg.Go(func() {
				served[i] = rs.send(t, client, start, iv.demand[i])
				if got := rs.attempts.Load() - before; got != iv.demand[i] {
					t.Errorf("%s saw %d requests, want %d", rs.name, got, iv.demand[i])
				}
			})
		}
		wg.Wait()

		var total, demand, shares int64
		for i, rs := range servers {
			total += served[i]
			demand += iv.demand[i]
			shares += rs.share
		}
		servable := min(demand, limit)
		t.Logf("minute %d (%s): shares %d/%d/%d, demand %d/%d/%d, served %d/%d/%d = %d of %d servable (%.1f%%)",
			k, iv.name, servers[0].share, servers[1].share, servers[2].share,
			iv.demand[0], iv.demand[1], iv.demand[2], served[0], served[1], served[2],
			total, servable, 100*float64(total)/float64(servable))
		if total > limit || shares > limit {
			t.Errorf("minute %d: served %d with shares summing to %d, over the global limit %d", k, total, shares, limit)
		}
		if iv.atLeast > 0 && float64(total) < iv.atLeast*float64(servable) {
			t.Errorf("minute %d (%s): served %d, below %.0f%% of %d", k, iv.name, total, 100*iv.atLeast, servable)
		}

		// Near the interval's end every region reports what it was asked; a little later all
		// try to rebalance, and exactly one computes the shares for the next boundary.
		reportAt, rebalanceAt := start+minute*85/100, start+minute*9/10
		for i, rs := range servers {
			wg.Go(func() {
				if err := rs.coord.Report(context.Background(), reportAt, iv.demand[i]); err != nil && rs.name != iv.cutOff {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		var computed atomic.Int64
		for i, rs := range servers {
			wg.Go(func() {
				did, err := rs.coord.Rebalance(context.Background(), rebalanceAt+int64(i))
				if err != nil && rs.name != iv.cutOff {
					t.Error(err)
				}
				if did {
					computed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := computed.Load(); n != 1 {
			t.Fatalf("minute %d: %d regions computed the rebalance, want exactly 1", k, n)
		}
	}
}
