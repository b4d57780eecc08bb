package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/storetest"
)

// TestFrozenRedisCountsNoLateCheck freezes Redis (SIGSTOP) while consuming calls with a short
// deadline are on their way to it. Their callers are told they failed; when Redis resumes, the
// scripts still in its sockets must count nothing, so that what Redis counted equals what callers
// were told was admitted.
func TestFrozenRedisCountsNoLateCheck(t *testing.T) {
	const deadline, frozen = 100 * time.Millisecond, 600 * time.Millisecond
	srv := redistest.StartServer(t)
	s := openStore(t, srv.URL())
	p := sluice.MustPolicy("late", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1_000_000, WindowMs: 1 << 40}})
	const name, limit = "late-slots", 1000

	// Each kind of call that consumes, and the units it counts on key "k" when admitted.
	kinds := []struct {
		name string
		call func(ctx context.Context, i int) (units int64, err error)
	}{
		{"Check", func(ctx context.Context, _ int) (int64, error) {
			d, err := s.Check(ctx, 0, p, "k", 1)
			return admitted(d, 1), err
		}},
		{"Check at an explicit instant", func(ctx context.Context, _ int) (int64, error) {
			d, err := s.Check(ctx, time.Now().UnixMilli(), p, "k", 2)
			return admitted(d, 2), err
		}},
		{"CheckMany", func(ctx context.Context, _ int) (int64, error) {
			out := make([]sluice.Decision, 2)
			err := s.CheckMany(ctx, 0, p, []string{"k", "k"}, 3, out)
			return admitted(out[0], 3) + admitted(out[1], 3), err
		}},
		{"CheckAll", func(ctx context.Context, _ int) (int64, error) {
			out := make([]sluice.Decision, 2)
			err := storetest.CheckAll(ctx, s, 0, []storetest.Op{{Policy: p, Key: "k", Cost: 4}, {Policy: p, Key: "k", Cost: 5}}, out)
			if err != nil || !out[0].Allowed || !out[1].Allowed {
				return 0, err
			}
			return 9, nil
		}},
		{"Debit", func(ctx context.Context, _ int) (int64, error) {
			if err := s.Debit(ctx, 0, p, "k", 6); err != nil {
				return 0, err
			}
			return 6, nil
		}},
		{"Admit", func(ctx context.Context, i int) (int64, error) {
			a, err := s.Admit(ctx, 0, name, "k", fmt.Sprint("holder-", i), limit, 3_600_000)
			if err != nil || !a.Allowed {
				return 0, err
			}
			return 1, nil
		}},
	}
	// told is what callers were told was counted: units on p's key, and slots held.
	var units, slots atomic.Int64
	call := func(k, i int, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		n, err := kinds[k].call(ctx, i)
		if err == nil {
			if kinds[k].name == "Admit" {
				slots.Add(n)
			} else {
				units.Add(n)
			}
		}
		return err
	}
	round := func(first int) {
		t.Helper()
		for k := range kinds {
			if err := call(k, first+k, 5*time.Second); err != nil {
				t.Fatalf("%s: %v", kinds[k].name, err)
			}
		}
	}
	round(0)

	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	froze := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unexpected []string
	for k := range kinds {
		for i := range 8 {
			wg.Go(func() {
				err := call(k, 100+10*k+i, deadline)
				if !errors.Is(err, sluice.ErrUnavailable) {
					mu.Lock()
					unexpected = append(unexpected, fmt.Sprintf("%s: %v", kinds[k].name, err))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(unexpected) > 0 {
		t.Errorf("calls to a frozen Redis: %d not ErrUnavailable, e.g. %v", len(unexpected), unexpected[0])
	}
	// Every deadline has passed well before Redis resumes: a script that runs then is late.
	time.Sleep(time.Until(froze.Add(frozen)))
	srv.Thaw()
	thawed = true
	round(1000)
	time.Sleep(200 * time.Millisecond) // the scripts queued in other connections have run by now

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := s.Peek(ctx, 0, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if counted := int64(1_000_000) - d.Remaining; counted != units.Load() {
		t.Errorf("Redis counted %d units on the key, callers were told %d were admitted", counted, units.Load())
	}
	a, err := s.Admit(ctx, 0, name, "k", "probe", limit, 3_600_000)
	if err != nil {
		t.Fatal(err)
	}
	if held := a.InFlight - 1; held != slots.Load() {
		t.Errorf("Redis holds %d slots, callers were told %d were admitted", held, slots.Load())
	}
	if n := s.Late(); n != 0 {
		t.Errorf("Late %d: no script that gave up may count as answered late", n)
	}
	stats, err := do(t, nodeClient(t, srv.Addr()), "INFO", "errorstats").ToString()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "errorstat_LATE:") {
		t.Errorf("no script answered LATE:\n%s", stats)
	}
}

// TestLateCountsSlowReplies delays Redis's replies past a check's deadline (a proxy holds them):
// the script ran in time and counted, its caller was told it failed, and Late counts it. This is
// the bound the instant to give up leaves: a reply slower on its way back than the margin.
func TestLateCountsSlowReplies(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := newSlowProxy(t, srv.Addr())
	s := openStore(t, "redis://"+proxy.addr)
	p := sluice.MustPolicy("slow", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 1 << 40}})
	warm(t, s)
	proxy.delay.Store(int64(300 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.Check(ctx, 0, p, "k", 1); !errors.Is(err, sluice.ErrUnavailable) {
		t.Errorf("a check whose reply takes 300 ms, with a 100 ms deadline: %v, want ErrUnavailable", err)
	}
	proxy.delay.Store(0)
	deadline := time.Now().Add(5 * time.Second)
	for s.Late() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Late %d, want 1", s.Late())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d, err := s.Peek(ctx, 0, p, "k"); err != nil || d.Remaining != 9 {
		t.Errorf("Peek: %+v, %v; want the late check counted, 9 left", d, err)
	}
}

// slowProxy forwards TCP connections to a Redis, holding each chunk of its replies for delay.
type slowProxy struct {
	addr  string
	delay atomic.Int64 // ns
}

func newSlowProxy(t *testing.T, target string) *slowProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{addr: l.Addr().String()}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, r)
			mu.Unlock()
			go func() { _, _ = io.Copy(r, c) }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := r.Read(buf)
					if n > 0 {
						time.Sleep(time.Duration(p.delay.Load()))
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// admitted is the units a decision of cost counted.
func admitted(d sluice.Decision, cost int64) int64 {
	if d.Allowed {
		return cost
	}
	return 0
}
