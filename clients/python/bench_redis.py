"""Latency of one check through RedisBackend beside the Go store, one caller, on the same Redis.

    /usr/bin/python3 clients/python/bench_redis.py [-n 5000] [--url redis://127.0.0.1:6379]

Each side runs n checks of one key on Redis's clock (now 0), one at a time after 200 to warm up,
and reports the median, 99th percentile and mean in microseconds. Python runs RedisBackend.check
(the general check script, EVALSHA through redis-py); Go runs redisstore.Store.Check (its
one-limit batch script, through rueidis) via the bench op of clients/gointerop/peer, which
answers the latencies it measured; both are summarized here alike. Both use a GCRA limit that
admits every check, so every check writes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis  # noqa: E402

from sluice.redis import RedisBackend  # noqa: E402
from sluice.strategies import Gcra  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STRATEGY = Gcra(limit=1_000_000, period_ms=1000, burst=1_000_000)


def _summary(took_us: List[float]) -> Dict[str, float]:
    """n, p50, p99 and mean of took_us, for either side."""
    s = sorted(took_us)
    n = len(s)
    return {"n": n, "p50Us": s[n // 2], "p99Us": s[n * 99 // 100], "meanUs": statistics.fmean(s)}


def bench_python(url: str, prefix: str, n: int) -> Dict[str, float]:
    """n checks through RedisBackend, one at a time."""
    client = redis.Redis.from_url(url)
    backend = RedisBackend(client, "bench", STRATEGY, prefix=prefix)
    for _ in range(200):
        backend.check("py")
    took: List[float] = []
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        backend.check("py")
        took.append((clock() - start) / 1000)
    client.delete(backend.redis_key("py"))
    return _summary(took)


def bench_go(url: str, prefix: str, n: int) -> Dict[str, float]:
    """n checks through the Go store (the bench op of clients/gointerop/peer)."""
    go = shutil.which("go")
    if go is None:
        raise SystemExit("no go on PATH")
    request = {"prefix": prefix, "policy": "bench", "strategy": STRATEGY.spec(), "op": "bench",
               "key": "go", "cost": 1, "n": n, "warm": 200}
    out = subprocess.run([go, "run", "./clients/gointerop/peer", "-url", url], cwd=REPO,
                         input=json.dumps(request) + "\n", capture_output=True, text=True, check=True,
                         timeout=600).stdout
    redis.Redis.from_url(url).delete(f"{prefix}:{{bench:go}}")
    reply = json.loads(out)
    if "error" in reply:
        raise SystemExit(f"go peer: {reply['error']}")
    return _summary([ns / 1000 for ns in reply["latenciesNs"]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5000)
    ap.add_argument("--url", default="redis://127.0.0.1:6379")
    ap.add_argument("--rounds", type=int, default=1, help="alternate Python and Go this many times")
    opts = ap.parse_args()
    prefix = f"sluice-bench-{uuid.uuid4().hex}"
    print(f"{'round':>5} {'side':<7} {'n':>6} {'p50 us':>9} {'p99 us':>9} {'mean us':>9}")
    for r in range(opts.rounds):
        for side, run in (("python", bench_python), ("go", bench_go)):
            s = run(opts.url, prefix, opts.n)
            print(f"{r + 1:>5} {side:<7} {s['n']:>6} {s['p50Us']:>9.1f} {s['p99Us']:>9.1f} {s['meanUs']:>9.1f}")


if __name__ == "__main__":
    main()
