"""The Python side of the clients' interop tests: RedisBackend, driven as clients/gointerop/peer is.

    PYTHONPATH=clients/python /usr/bin/python3 clients/python/tests/peer.py [--url redis://127.0.0.1:6379]

It reads one JSON request a line on stdin and answers one JSON line each on stdout, in order, in
the Go peer's protocol (its package doc): a request

    {"prefix":"p","policy":"api","strategy":{"kind":"gcra","limit":10,"periodMs":60000,"burst":10},
     "op":"check","key":"k","keys":["a","b"],"cost":1,"now":0}

runs op through a RedisBackend of that prefix, policy name and strategy (from_spec of the vectors'
form), on one ``redis.Redis.from_url`` client (--url, or SLUICE_REDIS_URL, or 127.0.0.1:6379).
now is epoch ms, 0 for Redis's clock; cost is 1 when left out. The ops and their replies:

    check      key, cost, now    {"decision":{...}}     RedisBackend.check
    peek       key, now          {"decision":{...}}     RedisBackend.peek
    forecast   key, cost, now    {"forecast":{...}}     RedisBackend.forecast
    refund     key, cost, now    {}                     RedisBackend.refund
    reset      key               {}                     RedisBackend.reset
    checkMany  keys, cost, now   {"decisions":[...]}    RedisBackend.check_many

A decision is written as Go's sluice.Decision JSON ({"allowed":true,"limit":10,"remaining":9,
"resetAt":...,"retryAfterMs":0,"deniedBy":-1}, parts, failOpen, override and plan only when set),
a forecast as sluice.Forecast's. A request that fails (a line that is not a request, a strategy
refused, an op this peer does not run, the backend's error) answers {"error":"..."} and the peer
reads on, until the end of stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the sluice package, uninstalled

import redis  # noqa: E402

from sluice import RedisBackend, from_spec  # noqa: E402
from sluice._types import Decision, Forecast  # noqa: E402


def decision_json(d: Decision) -> Dict[str, Any]:
    """d as Go's sluice.Decision marshals it."""
    out: Dict[str, Any] = {
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "resetAt": d.reset_at,
        "retryAfterMs": d.retry_after_ms,
        "deniedBy": d.denied_by,
    }
    if d.parts:
        out["parts"] = [decision_json(p) for p in d.parts]
    if d.fail_open:
        out["failOpen"] = True
    if d.override:
        out["override"] = True
    if d.plan:
        out["plan"] = d.plan
    return out


def forecast_json(f: Forecast) -> Dict[str, Any]:
    """f as Go's sluice.Forecast marshals it."""
    return {"spendableNow": f.spendable_now, "nextReplenishAt": f.next_replenish_at, "fullAt": f.full_at}


class Peer:
    """The backends of the requests so far, one per prefix, policy and strategy, on one client."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.backends: Dict[Tuple[str, str, str], RedisBackend] = {}

    def backend(self, req: Dict[str, Any]) -> RedisBackend:
        spec = req.get("strategy")
        if not isinstance(spec, dict):
            raise ValueError(f"strategy must be an object, got {spec!r}")
        k = (str(req.get("prefix", "")), str(req.get("policy", "")), json.dumps(spec, sort_keys=True))
        b = self.backends.get(k)
        if b is None:
            b = RedisBackend(self.client, k[1], from_spec(spec), prefix=k[0])
            self.backends[k] = b
        return b

    def serve(self, line: str) -> Dict[str, Any]:
        """The reply to one line."""
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError(f"a request is an object, got {line!r}")
            b = self.backend(req)
            op, key, keys = req.get("op"), req.get("key", ""), req.get("keys") or []
            cost = req.get("cost", 1)
            now: Optional[int] = req.get("now") or None  # 0: Redis's clock
            if op == "check":
                return {"decision": decision_json(b.check(key, cost, now=now))}
            if op == "peek":
                return {"decision": decision_json(b.peek(key, now=now))}
            if op == "forecast":
                return {"forecast": forecast_json(b.forecast(key, cost, now=now))}
            if op == "refund":
                b.refund(key, cost, now=now)
                return {}
            if op == "reset":
                b.reset(key)
                return {}
            if op == "checkMany":
                return {"decisions": [decision_json(d) for d in b.check_many(keys, cost, now=now)]}
            raise ValueError(f"unknown op {op!r}")
        except Exception as err:  # noqa: BLE001 - every failure is the request's answer
            return {"error": f"{type(err).__name__}: {err}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("SLUICE_REDIS_URL") or "redis://127.0.0.1:6379")
    opts = ap.parse_args()
    peer = Peer(opts.url)
    for line in sys.stdin:
        sys.stdout.write(json.dumps(peer.serve(line), separators=(",", ":")) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
