package bench

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	pgstore "github.com/sluicehq/sluice/store/postgres"
)

// BenchmarkPostgres runs sluice's PostgreSQL store beside pgbench on the same server: pgbench's
// transaction is one UPDATE of one row chosen at random among 10k, autocommitted, the physical
// anchor for "one durable row per decision". Both run 64 clients (pgbench -c 64; sluice's 64
// goroutines on a pool of 64 connections) over 10k keys, and report what each did per second and
// the p99 latency of one transaction or one check.
//
// The database is SLUICE_BENCH_POSTGRES, by default postgres://postgres@127.0.0.1:5432/test; the
// benchmark writes only the table sluice_bench_anchor and the schema sluice_bench, both dropped at
// the end. Without a server it skips, unless CI=true.
func BenchmarkPostgres(b *testing.B) {
	url := postgresURL(b)
	b.Run("pgbench-update", func(b *testing.B) { runPgbench(b, url) })
	st := openPostgres(b, url)
	defer st.Close()
	lim, err := sluice.New(st, sluice.MustPolicy("p", sluice.Limit{Strategy: redisGCRA}))
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, pgNumKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:%05d", i)
	}
	// Every key has its row before the timer starts, as pgbench's table has all of its rows.
	for i := 0; i < len(keys); i += 1000 {
		if _, err := lim.CheckMany(ctx, "p", keys[i:i+1000], 1); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("sluice-check", func(b *testing.B) {
		runPostgresParallel(b, 1, func(r *rand.Rand) (int, error) {
			d, err := lim.Check(ctx, "p", keys[r.IntN(len(keys))], 1)
			return allowedCount(d.Allowed), err
		})
	})
	b.Run("sluice-checkmany100", func(b *testing.B) {
		runPostgresParallel(b, 100, func(r *rand.Rand) (int, error) {
			batch := make([]string, 100)
			for i := range batch {
				batch[i] = keys[r.IntN(len(keys))]
			}
			ds, err := lim.CheckMany(ctx, "p", batch, 1)
			n := 0
			for _, d := range ds {
				n += allowedCount(d.Allowed)
			}
			return n, err
		})
	})
}

const (
	pgClients = 64
	pgNumKeys = 10_000
)

func allowedCount(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// postgresURL returns the benchmarks' database URL after checking that pgbench exists and the
// server answers; otherwise it skips b, or fails it when CI=true.
func postgresURL(b *testing.B) string {
	b.Helper()
	url := os.Getenv("SLUICE_BENCH_POSTGRES")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	skip := b.Skipf
	if os.Getenv("CI") == "true" {
		skip = b.Fatalf
	}
	if _, err := exec.LookPath("pgbench"); err != nil {
		skip("pgbench not found: %v", err)
	}
	if out, err := exec.Command("psql", url, "-Atqc", "select 1").CombinedOutput(); err != nil {
		skip("no PostgreSQL at %s (set SLUICE_BENCH_POSTGRES): %v %s", url, err, out)
	}
	return url
}

// openPostgres opens the store in its own schema, with a pool of one connection per client, and
// drops the schema at the end.
func openPostgres(b *testing.B, url string) *pgstore.Store {
	b.Helper()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	st, err := pgstore.Open(ctx, url+sep+"sluice_schema=sluice_bench&pool_max_conns="+strconv.Itoa(pgClients))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { exec.Command("psql", url, "-qc", "drop schema if exists sluice_bench cascade").Run() })
	return st
}

// runPgbench runs pgbench's single-row UPDATE, b.N transactions in all over 64 clients.
func runPgbench(b *testing.B, url string) {
	psql := func(sql string) {
		if out, err := exec.Command("psql", url, "-qc", sql).CombinedOutput(); err != nil {
			b.Fatalf("psql %q: %v %s", sql, err, out)
		}
	}
	psql("drop table if exists sluice_bench_anchor")
	// fillfactor leaves room for HOT updates, as sluice's table does.
	psql("create table sluice_bench_anchor (id int primary key, n bigint not null) with (fillfactor = 80)")
	psql(fmt.Sprintf("insert into sluice_bench_anchor select g, 0 from generate_series(1, %d) g", pgNumKeys))
	psql("vacuum analyze sluice_bench_anchor")
	defer psql("drop table if exists sluice_bench_anchor")
	dir := b.TempDir()
	script := filepath.Join(dir, "update.sql")
	os.WriteFile(script, []byte(fmt.Sprintf("\\set id random(1, %d)\nUPDATE sluice_bench_anchor SET n = n + 1 WHERE id = :id;\n", pgNumKeys)), 0o644)
	perClient := max(1, (b.N+pgClients-1)/pgClients)
	cmd := exec.Command("pgbench", "-n", "-M", "prepared", "-c", strconv.Itoa(pgClients), "-j", "2",
		"-t", strconv.Itoa(perClient), "-f", script, "-l", "--log-prefix", filepath.Join(dir, "log"), url)
	cmd.Dir = dir
	b.ResetTimer()
	out, err := cmd.CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("pgbench: %v\n%s", err, out)
	}
	// Each line of a pgbench log is "client transaction latency_us script epoch_s epoch_us".
	var lat []time.Duration
	logs, _ := filepath.Glob(filepath.Join(dir, "log*"))
	for _, name := range logs {
		f, err := os.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) >= 3 {
				us, _ := strconv.ParseInt(fields[2], 10, 64)
				lat = append(lat, time.Duration(us)*time.Microsecond)
			}
		}
		f.Close()
	}
	// pgbench's own rate leaves out its 64 connection setups, as sluice's side, on a warm pool,
	// does: counted in, they cost a one-second run about a fifth of its rate.
	m := pgbenchTPS.FindSubmatch(out)
	if m == nil {
		b.Fatalf("pgbench printed no tps:\n%s", out)
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	b.ReportMetric(tps, "txn/s")
	reportP99(b, lat)
}

var pgbenchTPS = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// runPostgresParallel runs step from 64 goroutines until b.N steps are done; each step decides per
// checks. It reports checks/s and the p99 latency of one step.
func runPostgresParallel(b *testing.B, per int, step func(r *rand.Rand) (int, error)) {
	b.ReportAllocs()
	var next, allowed atomic.Int64
	lats := make([][]time.Duration, pgClients)
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for c := range pgClients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), 7))
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				n, err := step(r)
				lats[c] = append(lats[c], time.Since(t0))
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				allowed.Add(int64(n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*per)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(allowed.Load())/float64(b.N*per), "allowed/op")
	reportP99(b, slices.Concat(lats...))
}

func reportP99(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
