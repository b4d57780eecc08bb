package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// quotaLimit is the daily quota of the durability tests' policy.
const quotaLimit = 1000

// TestDurableAcrossCrashes crashes sluice serve (SIGKILL: no graceful shutdown) and then its
// PostgreSQL store (SIGKILL: WAL recovery at restart), and checks that the quota spent before the
// crashes is still spent after them.
//
// The promise is that every check a client was told was allowed stays counted. It holds because an
// answer is sent only after the statement that decided it has committed (the store answers a
// batch's checks once the batch's statement returns), and a commit returns only after its WAL is
// flushed to disk (synchronous_commit is on by default, and pgtest keeps fsync on), so WAL recovery
// replays it. A check whose answer was lost in the crash may or may not have been committed (its
// statement may even commit after sluice died): at most one per client, the one it was waiting for.
func TestDurableAcrossCrashes(t *testing.T) {
	// A calendar day in UTC, which a test crossing midnight would see start over.
	if left := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)); left < 2*time.Minute {
		t.Skipf("the UTC day ends in %v, during the test", left)
	}
	bin := buildSluice(t)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()

	t.Run("between checks", func(t *testing.T) {
		pg, config := durableStore(t)
		addr, proc := startSluice(t, bin, config)
		for i := range 300 {
			d, err := ask(client, addr, "/v1/check", "acct")
			if err != nil || !d.Allowed || d.Remaining != quotaLimit-int64(i)-1 {
				t.Fatalf("check %d before the crash: %+v, %v", i, d, err)
			}
		}
		proc.Process.Kill() // kill -9: no graceful shutdown
		proc.Wait()
		addr = restartCrashed(t, pg, bin, config)

		if d, err := ask(client, addr, "/v1/peek", "acct"); err != nil || d.Remaining != quotaLimit-300 {
			t.Fatalf("peek after the crash: %+v, %v; want %d remaining", d, err, quotaLimit-300)
		}
		for i := range quotaLimit - 300 {
			if d, err := ask(client, addr, "/v1/check", "acct"); err != nil || !d.Allowed {
				t.Fatalf("check %d after the crash: %+v, %v; want allowed", i, d, err)
			}
		}
		if d, err := ask(client, addr, "/v1/check", "acct"); err != nil || d.Allowed {
			t.Errorf("the check past the quota: %+v, %v; want denied", d, err)
		}
	})

	t.Run("checks in flight", func(t *testing.T) {
		pg, config := durableStore(t)
		addr, proc := startSluice(t, bin, config)
		const clients = 32
		var allowed, lost atomic.Int64
		var mu sync.Mutex
		var denied []string
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for {
					d, err := ask(client, addr, "/v1/check", "acct")
					switch {
					case err != nil: // the kill, answering nothing: this check may have counted or not
						lost.Add(1)
						return
					case !d.Allowed:
						mu.Lock()
						denied = append(denied, fmt.Sprintf("%+v", d))
						mu.Unlock()
						return
					}
					allowed.Add(1)
				}
			})
		}
		eventually(t, "300 checks to be allowed", func() bool { return allowed.Load() >= 300 })
		proc.Process.Kill() // mid-run: every client has a check under way
		wg.Wait()
		if len(denied) > 0 {
			t.Fatalf("checks denied with the quota far from spent: %v", denied)
		}
		addr = restartCrashed(t, pg, bin, config)

		d, err := ask(client, addr, "/v1/peek", "acct")
		if err != nil {
			t.Fatal(err)
		}
		got, spent := d.Remaining, allowed.Load()
		t.Logf("%d checks allowed before the kill, %d lost in it; %d remaining after the crashes", spent, lost.Load(), got)
		if got > quotaLimit-spent {
			t.Errorf("%d remaining after the crashes, but %d checks were answered allowed before them: the quota forgot %d",
				got, spent, got-(quotaLimit-spent))
		}
		if low := quotaLimit - spent - lost.Load(); got < low {
			t.Errorf("%d remaining after the crashes, want at least %d: %d allowed and %d lost checks cannot have spent more",
				got, low, spent, lost.Load())
		}
	})
}

// durableStore starts a PostgreSQL server and writes a config of sluice serve on it: the daily
// quota, failing closed with a generous timeout, so that a store failure is an error, never a
// fail-open admission that would pass for a decision.
func durableStore(t *testing.T) (pg *pgtest.Server, config string) {
	t.Helper()
	pg = pgtest.StartServer(t)
	config = filepath.Join(t.TempDir(), "sluice.yaml")
	writeConfig(t, config, fmt.Sprintf(`store: %s
failMode: closed
storeTimeout: 5s
policies:
  quota: {strategy: fixedWindow, limit: %d, window: day}
`, pg.URL(), quotaLimit))
	return pg, config
}

// restartCrashed crashes PostgreSQL, starts it again (WAL recovery) and starts a new sluice serve on
// config, returning its HTTP address.
func restartCrashed(t *testing.T, pg *pgtest.Server, bin, config string) string {
	t.Helper()
	pg.Kill() // a crash: every process of the cluster dies at once
	pg.Start()
	addr, _ := startSluice(t, bin, config)
	return addr
}

// answer is a decision of the quota policy.
type answer struct {
	Allowed   bool  `json:"allowed"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
}

// ask posts the quota policy and key to path (/v1/check or /v1/peek) at addr; an answer that is not
// a decision of the store is an error.
func ask(client *http.Client, addr, path, key string) (answer, error) {
	var d answer
	body := fmt.Sprintf(`{"policy":"quota","key":%q}`, key)
	resp, err := client.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK || d.Limit != quotaLimit {
		return d, fmt.Errorf("%s: status %d, %+v, %v", path, resp.StatusCode, d, err)
	}
	return d, nil
}
