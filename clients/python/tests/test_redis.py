"""RedisBackend: keys and scripts shared with the Go store, bad input, faults, and Go beside Python.

The tests that need Redis use 127.0.0.1:6379 (or SLUICE_REDIS_URL), each under a prefix of its own;
without a Redis they skip, except under CI=true, where they fail. The Go tests run
clients/gointerop/peer (the Go store, store/redis) with ``go run`` and skip without a Go
toolchain, except under CI=true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sluice._types import Decision, Forecast  # noqa: E402
from sluice.errors import InvalidArgumentError, ServiceUnavailableError  # noqa: E402
from sluice.redis import LUA_DIR, MAX_KEY_LEN, RedisBackend, _script, script_source  # noqa: E402
from sluice.strategies import (  # noqa: E402
    FixedWindow,
    Gcra,
    SlidingWindow,
    SlidingWindowLog,
    Strategy,
    TokenBucket,
)

REPO = Path(__file__).resolve().parents[3]
URL = os.environ.get("SLUICE_REDIS_URL", "redis://127.0.0.1:6379")
CI = os.environ.get("CI") == "true"
T0 = 1_700_000_000_000  # an instant for replays


def _unavailable(what: str) -> None:
    if CI:
        pytest.fail(f"{what} under CI")
    pytest.skip(what)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A redis.Redis on SLUICE_REDIS_URL; skips without one (fails under CI=true)."""
    redis = pytest.importorskip("redis")
    c = redis.Redis.from_url(URL)
    try:
        c.ping()
    except redis.RedisError as err:
        _unavailable(f"no Redis at {URL}: {err}")
    yield c
    c.close()


@pytest.fixture
def prefix(client: Any) -> Iterator[str]:
    """A fresh key prefix, its keys deleted afterwards."""
    p = f"sluice-pytest-{uuid.uuid4().hex}"
    yield p
    keys = list(client.scan_iter(match=p + ":*", count=1000))
    if keys:
        client.delete(*keys)


# --- the Lua: the repository's own files, assembled as the Go store assembles them -------------


def test_lua_dir_is_the_stores() -> None:
    store = REPO / "store" / "redis" / "lua"
    assert LUA_DIR.is_dir()
    names = sorted(p.name for p in LUA_DIR.glob("*.lua"))
    assert names == sorted(p.name for p in store.glob("*.lua")) and "gcra.lua" in names
    for name in names:
        assert (LUA_DIR / name).read_bytes() == (store / name).read_bytes()


def test_scripts_hold_their_fragments() -> None:
    src = script_source("check", "t")
    # clock, header, strategy, near.functions, tokenbucket, tokenbucket.check, mget, steps, check.
    order = ["local server_ms = false", "local now = tonumber(ARGV[1])", "local S = {}",
             "local function load_near", "S.t = t", "function t.check", "local texts = redis.call('MGET'",
             "local n = #KEYS", "local per_group = tonumber(ARGV[4])"]
    at = [src.index(s) for s in order]
    assert at == sorted(at)
    assert "--@" not in src and "\n-->" not in src and "--> " not in src.replace("-- ", "")
    assert "local function pairs_of" in script_source("peek", "l") and "local function peeked" in script_source("peek", "l")
    assert "local function spendable" in script_source("forecast", "g")
    # near.read pasted inside load_near, indented as its "-->" line.
    assert "\n  do\n    local len = #text\n" in src


# The least pyproject.toml that packages the Lua: used when clients/python has none of its own.
_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sluice"
version = "0.0.0"

[tool.setuptools]
packages = ["sluice"]

[tool.setuptools.package-data]
sluice = ["py.typed", "lua/*.lua"]
"""


def test_installed_package_carries_the_lua(tmp_path: Path) -> None:
    """pip install --no-build-isolation ./clients/python copies store/redis/lua into the package
    (the link is followed), and the installed package assembles the same scripts."""
    pytest.importorskip("setuptools")
    tree = tmp_path / "repo"
    shutil.copytree(REPO / "store" / "redis" / "lua", tree / "store" / "redis" / "lua")
    pkg = tree / "clients" / "python"
    shutil.copytree(REPO / "clients" / "python" / "sluice", pkg / "sluice", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert (pkg / "sluice" / "lua").is_symlink()
    own = REPO / "clients" / "python" / "pyproject.toml"
    (pkg / "pyproject.toml").write_text(own.read_text() if own.exists() else _PYPROJECT)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                    "--no-cache-dir", "--target", str(site), str(pkg)], check=True, capture_output=True, timeout=300)
    lua = site / "sluice" / "lua"
    assert lua.is_dir() and not lua.is_symlink()
    assert sorted(p.name for p in lua.glob("*.lua")) == sorted(p.name for p in LUA_DIR.glob("*.lua"))
    probe = ("import sys, sluice.redis as r; print(r.LUA_DIR); "
             "print(r._script('check', 'g').sha, r._script('refund', 's').sha)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)},
                         check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[0] == str(lua)
    assert out[1].split() == [_script("check", "g").sha, _script("refund", "s").sha]


# --- keys: the Go store's ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy,prefix,key,want",
    [
        ("api", "sluice", "user:1", "sluice:{api:user:1}"),
        ("login:ip", "sluice", "1.2.3.4", "sluice:{login:ip:1.2.3.4}:n8"),
        ("a/b.c-d_e", "p", "k", "p:{a/b.c-d_e:k}"),
        ("api", "", "k", "sluice:{api:k}"),  # empty is the default prefix, as in Go
    ],
)
def test_keys(policy: str, prefix: str, key: str, want: str) -> None:
    assert RedisBackend(_NoClient(), policy, Gcra(1, 1000, 1), prefix=prefix).redis_key(key) == want


def test_state_lands_on_the_key(client: Any, prefix: str) -> None:
    b = RedisBackend(client, "login:ip", Gcra(10, 1000, 10), prefix=prefix)
    b.check("1.2.3.4", now=T0)
    assert client.exists(f"{prefix}:{{login:ip:1.2.3.4}}:n8") == 1
    assert len(client.get(f"{prefix}:{{login:ip:1.2.3.4}}:n8")) == 8  # the TAT, '<d'
    b.reset("1.2.3.4")
    assert client.exists(f"{prefix}:{{login:ip:1.2.3.4}}:n8") == 0


# --- operations --------------------------------------------------------------------------------


def test_operations(client: Any, prefix: str) -> None:
    b = RedisBackend(client, "ops", TokenBucket(5, 1), prefix=prefix)
    assert b.check("k", 3, now=T0) == Decision(True, 5, 2, T0 + 3000, 0)
    assert b.peek("k", now=T0) == Decision(True, 5, 2, T0 + 3000, 0)
    assert b.forecast("k", 2, now=T0) == Forecast(1, T0 + 1000, T0 + 3000)
    assert b.check("k", 3, now=T0) == Decision(False, 5, 2, T0 + 3000, 1000, denied_by=0)
    b.refund("k", 2, now=T0)
    assert b.peek("k", now=T0).remaining == 4
    b.reset("k")
    assert b.peek("k", now=T0).remaining == 5


def test_check_many_is_checks_in_order(client: Any, prefix: str) -> None:
    keys = ["a", "b", "a", "a", "c", "a"]
    many = RedisBackend(client, "many", SlidingWindowLog(3, 1000), prefix=prefix)
    one = RedisBackend(client, "one", SlidingWindowLog(3, 1000), prefix=prefix)
    assert many.check_many(keys, 1, now=T0) == [one.check(k, 1, now=T0) for k in keys]
    assert [d.allowed for d in many.check_many(keys, 1, now=T0 + 1)] == [False, True, False, False, True, False]
    assert many.check_many([], now=T0) == []


def test_server_clock(client: Any, prefix: str) -> None:
    b = RedisBackend(client, "clock", FixedWindow(2, 60_000), prefix=prefix)
    ds = [b.check("k") for _ in range(3)]
    assert [d.allowed for d in ds] == [True, True, False]
    sec, usec = client.time()
    assert abs(ds[0].reset_at - (sec * 1000 + usec // 1000)) <= 60_000
    assert not b.check("k", now=0).allowed  # 0 is Redis's clock too, as Go's WithNow reads it


def test_noscript_falls_back_to_eval(client: Any, prefix: str) -> None:
    import redis

    class Forgetful:
        """A client whose Redis has lost every script (a restart): EVALSHA answers NOSCRIPT."""

        def __init__(self) -> None:
            self.evals = 0

        def script_load(self, source: str) -> Any:
            return client.script_load(source)

        def evalsha(self, *a: Any) -> Any:
            raise redis.exceptions.NoScriptError("NOSCRIPT No matching script.")

        def eval(self, *a: Any) -> Any:
            self.evals += 1
            return client.eval(*a)

    c = Forgetful()
    b = RedisBackend(c, "noscript", Gcra(1, 1000, 1), prefix=prefix)
    assert b.check("k", now=T0).allowed and not b.check("k", now=T0).allowed
    assert c.evals == 2


def test_script_loaded_once(client: Any, prefix: str) -> None:
    class Counting:
        def __init__(self) -> None:
            self.loads = 0

        def script_load(self, source: str) -> Any:
            self.loads += 1
            return client.script_load(source)

        def evalsha(self, *a: Any) -> Any:
            return client.evalsha(*a)

    c = Counting()
    b = RedisBackend(c, "once", Gcra(10, 1000, 10), prefix=prefix)
    for _ in range(5):
        b.check("k", now=T0)
    assert c.loads == 1
    assert client.script_exists(_script("check", "g").sha) == [True]


# --- bad input: refused by field, nothing sent ---------------------------------------------------


class _NoClient:
    """A client that fails the test if anything is sent."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"sent {name} for bad input")


_BAD: List[Tuple[str, str, Dict[str, Any]]] = [
    ("cost 0", "cost", {"cost": 0}),
    ("cost -1", "cost", {"cost": -1}),
    ("cost above the ceiling", "cost", {"cost": 11}),
    ("cost not an integer", "cost", {"cost": 1.5}),
    ("cost a bool", "cost", {"cost": True}),
    ("cost a string", "cost", {"cost": "1"}),
    ("empty key", "key", {"key": ""}),
    ("key over MaxKeyLen", "key", {"key": "k" * (MAX_KEY_LEN + 1)}),
    ("key over MaxKeyLen in bytes", "key", {"key": "é" * (MAX_KEY_LEN // 2 + 1)}),
    ("key not a string", "key", {"key": b"k"}),
    ("now negative", "now", {"now": -1}),
    ("now a float", "now", {"now": 1.5e12}),
]


def _applies(op: str, field: str, name: str) -> bool:
    """Whether op takes field (peek and reset take no cost, reset no now; a refund's cost has no
    ceiling: it may give back more than one check admits)."""
    if field == "cost" and op in ("peek", "reset") or field == "now" and op == "reset":
        return False
    return not (op == "refund" and name == "cost above the ceiling")


_OPS = ["check", "check_many", "peek", "forecast", "refund", "reset"]
_BAD_CASES = [(op, *bad) for op in _OPS for bad in _BAD if _applies(op, bad[1], bad[0])]


@pytest.mark.parametrize("op,name,field,override", _BAD_CASES, ids=[f"{c[0]}-{c[1]}" for c in _BAD_CASES])
def test_bad_input(op: str, name: str, field: str, override: Dict[str, Any]) -> None:
    b = RedisBackend(_NoClient(), "api", Gcra(10, 1000, 10))
    args: Dict[str, Any] = {"key": "k", "cost": 1, "now": T0, **override}
    with pytest.raises(InvalidArgumentError) as err:
        if op == "check_many":
            b.check_many(["ok", args["key"]], args["cost"], now=args["now"])
        elif op == "reset":
            b.reset(args["key"])
        elif op == "peek":
            b.peek(args["key"], now=args["now"])
        else:
            getattr(b, op)(args["key"], args["cost"], now=args["now"])
    want = "keys[1]" if op == "check_many" and field == "key" else field
    assert err.value.field == want


def test_key_at_max_len_is_fine() -> None:
    b = RedisBackend(_NoClient(), "api", Gcra(10, 1000, 10))
    assert b.redis_key("k" * MAX_KEY_LEN).endswith("k}")


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"policy_name": ""}, "policy"),
        ({"policy_name": "a b"}, "policy"),
        ({"policy_name": "p" * 129}, "policy"),
        ({"strategy": {"kind": "gcra"}}, "strategy"),
        ({"fail_mode": "sometimes"}, "fail_mode"),
        ({"ttl_slack_ms": -1}, "ttl_slack_ms"),
        ({"timeout_ms": 0}, "timeout_ms"),
        ({"timeout_ms": float("nan")}, "timeout_ms"),
    ],
)
def test_bad_backend(kwargs: Dict[str, Any], field: str) -> None:
    args: Dict[str, Any] = {"client": _NoClient(), "policy_name": "api", "strategy": Gcra(1, 1000, 1), **kwargs}
    with pytest.raises(InvalidArgumentError) as err:
        RedisBackend(**args)
    assert err.value.field == field


def test_late_check_counts_nothing(client: Any, prefix: str) -> None:
    """A check whose script reaches Redis past its instant to give up answers LATE and counts
    nothing: unavailable (closed), or allowed unconsulted (open)."""

    class Slow:
        """A client whose commands reach Redis 150 ms after they are sent (a paused network)."""

        def script_load(self, source: str) -> Any:
            return client.script_load(source)

        def evalsha(self, *a: Any) -> Any:
            time.sleep(0.15)
            return client.evalsha(*a)

    for mode in ("closed", "open"):
        b = RedisBackend(Slow(), "late", Gcra(10, 1000, 10), prefix=prefix, fail_mode=mode, timeout_ms=100)
        if mode == "closed":
            with pytest.raises(ServiceUnavailableError, match="LATE"):
                b.check("k")
        else:
            assert b.check_many(["k", "k"]) == [Decision(allowed=True, fail_open=True)] * 2
    assert client.exists(f"{prefix}:{{late:k}}") == 0  # nothing was counted
    on_time = RedisBackend(Slow(), "late", Gcra(10, 1000, 10), prefix=prefix, timeout_ms=1000)
    assert on_time.check("k").remaining == 9  # 150 ms is within 1 s less its margin


# --- faults: Redis unreachable ------------------------------------------------------------------


def _dead_client() -> Any:
    redis = pytest.importorskip("redis")
    return redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2)


def test_fail_closed() -> None:
    b = RedisBackend(_dead_client(), "api", Gcra(10, 1000, 10))
    for call in (lambda: b.check("k"), lambda: b.check_many(["k"]), lambda: b.peek("k"),
                 lambda: b.forecast("k"), lambda: b.refund("k", 1), lambda: b.reset("k")):
        with pytest.raises(ServiceUnavailableError):
            call()


def test_fail_open() -> None:
    b = RedisBackend(_dead_client(), "api", Gcra(10, 1000, 10), fail_mode="open")
    assert b.check("k") == Decision(allowed=True, fail_open=True)
    assert b.check_many(["a", "b"]) == [Decision(allowed=True, fail_open=True)] * 2
    with pytest.raises(ServiceUnavailableError):  # only checks fail open
        b.peek("k")
    with pytest.raises(InvalidArgumentError):  # bad input is bad input in any fail mode
        b.check("")


def test_script_error_is_unavailable(client: Any, prefix: str) -> None:
    import redis

    class Erring:
        """A client whose scripts fail in Redis (an error reply)."""

        def script_load(self, source: str) -> Any:
            return client.script_load(source)

        def evalsha(self, *a: Any) -> Any:
            raise redis.exceptions.ResponseError("ERR user_script:1: something broke")

    for mode, want in (("closed", None), ("open", Decision(allowed=True, fail_open=True))):
        b = RedisBackend(Erring(), "api", Gcra(10, 1000, 10), prefix=prefix, fail_mode=mode)
        if want is None:
            with pytest.raises(ServiceUnavailableError, match="something broke"):
                b.check("k", now=T0)
        else:
            assert b.check("k", now=T0) == want


# --- Go beside Python: one limit, one key --------------------------------------------------------


class GoStore:
    """The Go store (clients/gointerop/peer) on the same Redis, prefix and policy, fed one JSON
    request a line (the peer's doc states the protocol)."""

    def __init__(self, prefix: str, policy: str, strategy: Strategy) -> None:
        go = shutil.which("go")
        if go is None:
            _unavailable("no Go toolchain")
        args = [go, "run", "./clients/gointerop/peer", "-url", URL]
        self.base = {"prefix": prefix, "policy": policy, "strategy": strategy.spec()}
        self.proc = subprocess.Popen(args, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, op: str, key: str = "", cost: int = 1, now: Optional[int] = None, **more: Any) -> Dict[str, Any]:
        """The peer's reply to op on key at now (None: Redis's clock), which must not be an error."""
        assert self.proc.stdin and self.proc.stdout
        line = json.dumps({**self.base, "op": op, "key": key, "cost": cost, "now": now or 0, **more})
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        assert reply, f"the Go peer exited ({self.proc.poll()}) on {line!r}"
        out: Dict[str, Any] = json.loads(reply)
        assert "error" not in out, out
        return out

    def check(self, key: str, cost: int = 1, now: Optional[int] = None) -> Decision:
        d = self.ask("check", key, cost, now)["decision"]
        return Decision(d["allowed"], d["limit"], d["remaining"], d["resetAt"], d["retryAfterMs"],
                        denied_by=-1 if d["allowed"] else 0)

    def check_many(self, keys: List[str], cost: int = 1, now: Optional[int] = None) -> List[Decision]:
        out = self.ask("checkMany", cost=cost, now=now, keys=keys)["decisions"]
        assert isinstance(out, list), out
        return [Decision(d["allowed"], d["limit"], d["remaining"], d["resetAt"], d["retryAfterMs"],
                         denied_by=-1 if d["allowed"] else 0) for d in out]

    def forecast(self, key: str, cost: int = 1, now: Optional[int] = None) -> Dict[str, Any]:
        """The peer's forecast, as sluice.Forecast's JSON."""
        out: Dict[str, Any] = self.ask("forecast", key, cost, now)["forecast"]
        return out

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def go_store(client: Any, prefix: str) -> Iterator[Any]:
    stores: List[GoStore] = []

    def start(policy: str, strategy: Strategy) -> GoStore:
        stores.append(GoStore(prefix, policy, strategy))
        return stores[-1]

    yield start
    for s in stores:
        s.close()


# Limits that give nothing back within a test: the total admitted is the ceiling.
_SLOW: List[Strategy] = [
    Gcra(limit=10, period_ms=3_600_000, burst=10),
    TokenBucket(capacity=10, refill_per_sec=0.001),
    FixedWindow(limit=10, window_ms=3_600_000),
    FixedWindow(limit=10, calendar="month", timezone="Europe/Rome"),
    SlidingWindow(limit=10, window_ms=3_600_000, buckets=4),
    SlidingWindowLog(limit=10, window_ms=3_600_000),
]


@pytest.mark.parametrize("strategy", _SLOW, ids=[s.kind + s.calendar for s in _SLOW])
def test_go_and_python_share_one_limit(client: Any, prefix: str, go_store: Any, strategy: Strategy) -> None:
    """Alternating Go and Python checks of one key on Redis's clock admit the ceiling in all."""
    policy = "interop:api"  # a name with ':' exercises the :n suffix on both sides
    py = RedisBackend(client, policy, strategy, prefix=prefix)
    go = go_store(policy, strategy)
    decisions = []
    for i in range(16):
        d = py.check("shared") if i % 2 == 0 else go.check("shared")
        decisions.append(d)
    admitted = sum(d.allowed for d in decisions)
    assert admitted == 10
    assert [d.allowed for d in decisions] == [True] * 10 + [False] * 6
    assert [d.remaining for d in decisions[:10]] == list(range(9, -1, -1))
    # A denial from one is a denial from the other.
    assert not py.check("shared").allowed and not go.check("shared").allowed
    assert client.exists(py.redis_key("shared")) == 1


_TIMELINE: List[Strategy] = [
    Gcra(limit=5, period_ms=1000, burst=3),
    TokenBucket(capacity=4, refill_per_sec=2.5),
    FixedWindow(limit=4, window_ms=700),
    FixedWindow(limit=4, calendar="day", timezone="America/Santiago"),
    SlidingWindow(limit=4, window_ms=1000, buckets=3),
    SlidingWindowLog(limit=4, window_ms=900),
]


@pytest.mark.parametrize("strategy", _TIMELINE, ids=[s.kind + s.calendar for s in _TIMELINE])
def test_go_and_python_decide_as_one(client: Any, prefix: str, go_store: Any, strategy: Strategy) -> None:
    """A timeline whose checks alternate between Go and Python decides as Python alone does."""
    go = go_store("mixed", strategy)
    mixed = RedisBackend(client, "mixed", strategy, prefix=prefix)
    alone = RedisBackend(client, "alone", strategy, prefix=prefix)
    now, step = T0, 0
    if isinstance(strategy, FixedWindow) and strategy.calendar:
        now = int(strategy.bounds(T0)[1]) - 2000  # across a local midnight
    for gap, cost in [(0, 1), (0, 2), (10, 1), (50, 1), (120, 1), (0, 1), (333, 2), (1, 1), (700, 3),
                      (5, 1), (0, 1), (250, 1), (999, 4), (0, 1), (60, 2), (10, 1)]:
        now += gap
        cost = min(cost, strategy.ceiling)
        via = go.check("k", cost, now) if step % 2 else mixed.check("k", cost, now=now)
        assert via == alone.check("k", cost, now=now), f"step {step} at +{now - T0} ms"
        step += 1
    # Peek and forecast read what the Go checks wrote as well.
    assert mixed.peek("k", now=now) == alone.peek("k", now=now)
    assert mixed.forecast("k", 1, now=now) == alone.forecast("k", 1, now=now)
    g = go.forecast("k", 1, now)
    f = alone.forecast("k", 1, now=now)
    assert (g["spendableNow"], g["nextReplenishAt"], g["fullAt"]) == (f.spendable_now, f.next_replenish_at, f.full_at)


@pytest.mark.parametrize("strategy", _TIMELINE, ids=[s.kind + s.calendar for s in _TIMELINE])
def test_go_sends_the_same_general_scripts(client: Any, prefix: str, go_store: Any, strategy: Strategy) -> None:
    """The general scripts the Go store sends (peek, forecast, refund; a CheckMany of a sliding
    window or log) are Python's, byte for byte: Redis knows them by the same SHA-1."""
    redis = pytest.importorskip("redis")
    go = go_store("same", strategy)
    go.check("warm", 1, T0)  # compiled and connected before MONITOR starts
    seen: List[str] = []
    stop = f"stop-{uuid.uuid4().hex}"
    ready = threading.Event()

    def watch() -> None:
        mon = redis.Redis.from_url(URL)
        with mon.monitor() as m:
            ready.set()
            while True:
                cmd = m.next_command()["command"]
                if stop in cmd:
                    return
                if prefix in cmd and cmd.split(" ", 1)[0].upper() in ("EVALSHA", "EVAL"):
                    seen.append(cmd)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    assert ready.wait(10)
    go.ask("peek", "k", now=T0)
    go.ask("forecast", "k", 1, T0)
    go.ask("refund", "k", 1, T0)
    go.check_many(["a", "b"], 1, T0)
    client.echo(stop)
    t.join(10)
    shas = {cmd.split(" ")[1] for cmd in seen if cmd.upper().startswith("EVALSHA")}
    ops = ["peek", "forecast", "refund"] + (["check"] if strategy.letter in "sl" else [])
    for op in ops:
        assert _script(op, strategy.letter).sha in shas, (op, seen)


@pytest.mark.parametrize("strategy", _TIMELINE, ids=[s.kind + s.calendar for s in _TIMELINE])
def test_check_many_as_go(client: Any, prefix: str, go_store: Any, strategy: Strategy) -> None:
    """check_many decides as the Go store's CheckMany, on keys each has been checking."""
    go = go_store("many", strategy)
    py = RedisBackend(client, "many", strategy, prefix=prefix)
    keys = ["a", "b", "a", "c", "a", "b"]
    cost = min(2, strategy.ceiling)
    for i in range(4):
        now = T0 + 97 * i
        mine = py.check_many(keys, cost, now=now) if i % 2 == 0 else go.check_many(keys, cost, now)
        theirs = RedisBackend(client, "many-alone", strategy, prefix=prefix).check_many(keys, cost, now=now)
        assert mine == theirs, i
