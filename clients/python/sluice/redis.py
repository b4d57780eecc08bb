"""The direct Redis door: decide checks on the Redis a Go fleet of sluice uses, with its own scripts.

:class:`RedisBackend` runs the repository's Lua (``store/redis/lua/*.lua``, the one definition of
the Redis store's scripts and of the state they keep; this package's ``lua`` directory is that
directory) on the keys the Go store (``store/redis``) uses for the same policy name and key. So a
Python process and Go processes share one limit: each check is one atomic script in Redis, and
whichever process sends it, Redis decides it against the same state.

The model, as docs/redis.md ("Keys and memory", "The Lua scripts") describes it:

* **Keys.** Policy ``name`` with one limit keeps key ``k``'s state at ``<prefix>:{<name>:<k>}``,
  with ``:n<len(name)>`` after it when the name holds ``:``. The braces are a Cluster hash tag.
* **Scripts.** A file's fragments start at lines ``--@`` (the file's own) and ``--@ name``
  (``file.name``); a line ``--> name`` is replaced by that fragment, indented as the line is. The
  general script of an operation on strategy X is ``clock``, ``header``, ``strategy``,
  ``near.functions`` (token bucket, fixed window) or ``lists`` (sliding window, log), the
  operation's ``helpers`` if it has some, X's file and its operation's fragment, then ``mget``,
  ``steps`` and the operation. Each is loaded once with ``SCRIPT LOAD`` and run with ``EVALSHA``,
  falling back to ``EVAL`` when Redis answers ``NOSCRIPT`` (a restart, ``SCRIPT FLUSH``).
* **Arguments.** ``KEYS`` are the steps' keys; ``ARGV`` is now (epoch ms, ``0``: Redis's clock),
  the TTL slack, the instant to give up (``0``: none), steps per all-or-nothing group, the number
  of limits (1), the limit's letter and six parameters (a calendar window's: the bounds of three
  calendar windows around the call's instant, this process's clock when now is Redis's, as Go
  sends them), then the limit and cost of every step (one pair: all steps share them). Numbers are
  printed with ``repr`` of a float, which Lua reads back as the same double.
* **Replies.** A check or peek answers five integers per step (allowed, limit, remaining, resetAt,
  retryAfterMs), a forecast three (spendableNow, nextReplenishAt, fullAt), a refund none.

Bad input is refused before anything is sent, with InvalidArgumentError naming the field, as the Go
library refuses it. A Redis that cannot answer is a ServiceUnavailableError, except for checks
under ``fail_mode="open"``, which are then allowed with ``fail_open=True`` (no limit consulted).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from ._types import FAIL_MODES, MAX_KEY_LEN, Decision, Forecast, check_cost, check_key, check_now
from .errors import InvalidArgumentError, ServiceUnavailableError
from .strategies import Strategy

if TYPE_CHECKING:  # redis is needed only by whoever builds the client
    import redis as _redis

__all__ = ["RedisBackend", "DEFAULT_PREFIX", "MAX_KEY_LEN", "LUA_DIR", "script_source"]

#: The Go store's default key prefix (redisstore.Config.Prefix).
DEFAULT_PREFIX = "sluice"

#: The Go store's default TTL slack in ms (redisstore.Config.TTLSlack).
DEFAULT_TTL_SLACK_MS = 1000

#: The directory of the store's Lua files: a link to store/redis/lua in the repository, a copy of
#: it in an installed package.
LUA_DIR = Path(__file__).resolve().parent / "lua"

# The largest cost a refund takes, as Go's int64.
_MAX_INT64 = (1 << 63) - 1

# A policy name: 1 to 128 bytes of letters, digits and -_.:/ (Go's validName).
_POLICY_NAME = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")

# Each strategy letter's file.
_FILES = {"g": "gcra", "t": "tokenbucket", "f": "fixedwindow", "s": "slidingwindow", "l": "slidinglog"}

_OPS = ("check", "peek", "forecast", "refund")


# ---------------------------------------------------------------------------------------------
# Scripts: the fragments of lua/*.lua, assembled as store/redis/scripts.go assembles them.


@lru_cache(maxsize=None)
def _fragments(lua_dir: str) -> Dict[str, str]:
    """Every fragment of lua_dir/*.lua by name ("clock", "gcra.check", ...)."""
    out: Dict[str, str] = {}
    paths = sorted(Path(lua_dir).glob("*.lua"))
    if not paths:
        raise FileNotFoundError(f"sluice: no Lua files in {lua_dir}")
    for path in paths:
        name: Optional[str] = None
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            if line.startswith("--@"):
                rest = line[3:].strip()
                name = path.stem + ("." + rest if rest else "")
                if name in out:
                    raise ValueError(f"sluice: {path}: fragment {name} twice")
                out[name] = ""
            elif name is not None:
                out[name] += line
    return out


def _paste(frags: Dict[str, str], name: str, indent: str, out: List[str], depth: int = 0) -> None:
    """Appends fragment name to out, each line indented, with its "--> name" lines replaced."""
    if name not in frags or depth > 8:
        raise ValueError(f"sluice: Lua fragment {name} is missing or nests too deep")
    for line in frags[name].splitlines(keepends=True):
        body = line.lstrip(" ")
        inner = body.strip()
        if inner.startswith("--> "):
            _paste(frags, inner[4:].strip(), indent + line[: len(line) - len(body)], out, depth + 1)
        else:
            out.append(line if line == "\n" else indent + line)


def _recipe(frags: Dict[str, str], op: str, letter: str) -> List[str]:
    """The fragments of the general script of op on one strategy, in order (docs/redis.md)."""
    names = ["clock", "header", "strategy"]
    if letter in "tf":
        names.append("near.functions")
    if letter in "sl":
        names.append("lists")
    if op + ".helpers" in frags:
        names.append(op + ".helpers")
    file = _FILES[letter]
    return names + [file, f"{file}.{op}", "mget", "steps", op]


def script_source(op: str, letter: str, lua_dir: Path = LUA_DIR) -> str:
    """The source of the general script of op ("check", "peek", "forecast", "refund") on the
    strategy of letter (g t f s l), exactly as the Go store assembles it."""
    frags = _fragments(str(lua_dir))
    out: List[str] = []
    for name in _recipe(frags, op, letter):
        _paste(frags, name, "", out)
    return "".join(out)


@dataclass(frozen=True)
class _Script:
    """A script's source and the SHA-1 Redis knows it by."""

    source: str
    sha: str


@lru_cache(maxsize=None)
def _script(op: str, letter: str) -> _Script:
    """The general script of op on letter's strategy, assembled and hashed once."""
    source = script_source(op, letter)
    return _Script(source, hashlib.sha1(source.encode("utf-8")).hexdigest())


# ---------------------------------------------------------------------------------------------
# Validation: what the Go library refuses, refused the same way, before anything is sent.


def _check_policy_name(name: object) -> str:
    if not isinstance(name, str) or not _POLICY_NAME.fullmatch(name):
        raise InvalidArgumentError(
            "policy", f"name must be 1 to 128 bytes of letters, digits and -_.:/, got {name!r}"
        )
    return name


def _check_cost(cost: object, most: int, policy: str) -> int:
    """cost, if an int from 1 to most (the strategy's ceiling, for checks and forecasts)."""
    c = check_cost(cost)
    if c > most:
        raise InvalidArgumentError("cost", f"{c} exceeds {most}, the most policy {policy!r} can ever admit")
    return c


def _now_arg(now: Optional[int]) -> int:
    """ARGV[1]: now in epoch ms; 0, Redis's clock, for None (or 0, as Go's WithNow reads it)."""
    return check_now(now)


def _decision(v: Sequence[int]) -> Decision:
    """The decision of one step from its five integers, as the Go store's decision()."""
    allowed = v[0] == 1
    return Decision(
        allowed=allowed,
        limit=int(v[1]),
        remaining=int(v[2]),
        reset_at=int(v[3]),
        retry_after_ms=int(v[4]),
        denied_by=-1 if allowed else 0,
    )


_FAIL_OPEN = Decision(allowed=True, denied_by=-1, fail_open=True)


class RedisBackend:
    """Decides checks of one policy, a name and one strategy, on a Redis shared with Go processes.

    ``client`` is a ``redis.Redis`` (any object with ``script_load``, ``evalsha``, ``eval`` and
    ``delete`` as redis-py has them). ``policy_name`` and ``prefix`` must be what the Go processes
    use for the same limit (``prefix`` is redisstore.Config.Prefix, ``"sluice"`` by default), and
    ``strategy`` the same parameters: the state is shared, not the configuration. ``ttl_slack_ms``
    is Config.TTLSlack. ``fail_mode`` says what a check answers when Redis cannot: ``"closed"``
    raises ServiceUnavailableError, ``"open"`` allows with ``fail_open=True``.

    ``timeout_ms`` gives each check a deadline, as a Go caller's context does: its script carries an
    instant to give up, the deadline less an eighth of timeout_ms (at most 50 ms), and one that
    reaches Redis at or past it on Redis's clock (Redis stalled, the network paused) answers LATE
    and counts nothing, since its caller may have given up on it; the check is then unavailable.
    Waiting is bounded by the client's own ``socket_timeout``, which should be no longer.

    Methods take ``now``, epoch ms, for replays and tests; None decides at Redis's clock, one clock
    for the whole fleet. Safe for concurrent use as the client is.
    """

    def __init__(
        self,
        client: "_redis.Redis[Any]",
        policy_name: str,
        strategy: Strategy,
        *,
        prefix: str = DEFAULT_PREFIX,
        fail_mode: str = "closed",
        ttl_slack_ms: int = DEFAULT_TTL_SLACK_MS,
        timeout_ms: Optional[float] = None,
    ) -> None:
        if not isinstance(strategy, Strategy):
            raise InvalidArgumentError("strategy", f"must be a sluice strategy, got {type(strategy).__name__}")
        if fail_mode not in FAIL_MODES:
            raise InvalidArgumentError("fail_mode", f"must be open or closed, got {fail_mode!r}")
        if not isinstance(prefix, str):
            raise InvalidArgumentError("prefix", f"must be a string, got {type(prefix).__name__}")
        if isinstance(ttl_slack_ms, bool) or not isinstance(ttl_slack_ms, int) or ttl_slack_ms < 0:
            raise InvalidArgumentError("ttl_slack_ms", f"must be an integer from 0, got {ttl_slack_ms!r}")
        if timeout_ms is not None and (
            isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or not 0 < timeout_ms < math.inf
        ):
            raise InvalidArgumentError("timeout_ms", f"must be above 0, got {timeout_ms!r}")
        self.timeout_ms = timeout_ms
        self._client = client
        self.policy_name = _check_policy_name(policy_name)
        self.strategy = strategy
        self.prefix = prefix or DEFAULT_PREFIX  # empty is the default, as in Go
        self.fail_mode = fail_mode
        self._loaded: Set[str] = set()
        # ARGV[2..] up to the steps' pair: slack, no instant to give up, then (after ARGV[4], the
        # steps per group) one limit and its letter and six parameters.
        self._slack = str(ttl_slack_ms)
        # The limit's arguments, the same for every call but a calendar window's (its bounds).
        self._limit_args: Optional[Tuple[str, ...]] = None if strategy.calendar else ("1", *strategy.script_params())
        self._key_head = f"{self.prefix}:{{{self.policy_name}:"
        self._key_tail = "}" + (f":n{len(self.policy_name)}" if ":" in self.policy_name else "")

    def __repr__(self) -> str:
        return f"RedisBackend(policy_name={self.policy_name!r}, strategy={self.strategy!r}, prefix={self.prefix!r})"

    # -- keys -------------------------------------------------------------------------------------

    def redis_key(self, key: str) -> str:
        """Where the state of key lives, as the Go store names it (store/redis key())."""
        return self._key_head + key + self._key_tail

    # -- operations -------------------------------------------------------------------------------

    def check(self, key: str, cost: int = 1, *, now: Optional[int] = None) -> Decision:
        """Consumes cost units for key if the limit allows them: one atomic script."""
        name = self.redis_key(check_key(key))
        args = self._args(_now_arg(now), "1", _check_cost(cost, self.strategy.ceiling, self.policy_name))
        args[2] = self._give_up()
        try:
            v = self._run("check", [name], args)
        except ServiceUnavailableError:
            if self.fail_mode == "open":
                return _FAIL_OPEN
            raise
        return _decision(v)

    def check_many(self, keys: Sequence[str], cost: int = 1, *, now: Optional[int] = None) -> List[Decision]:
        """Checks every key, each on its own, in order, at one instant: one script for them all.

        A key that appears twice sees its first check, as two checks one after another would.
        """
        if isinstance(keys, (str, bytes)):
            raise InvalidArgumentError("keys", "must be a sequence of keys, not one key")
        names = [self.redis_key(check_key(k, f"keys[{i}]")) for i, k in enumerate(keys)]
        args = self._args(_now_arg(now), "1", _check_cost(cost, self.strategy.ceiling, self.policy_name))
        if not names:
            return []
        args[2] = self._give_up()
        try:
            v = self._run("check", names, args)
        except ServiceUnavailableError:
            if self.fail_mode == "open":
                return [_FAIL_OPEN] * len(names)
            raise
        return [_decision(v[5 * i : 5 * i + 5]) for i in range(len(names))]

    def peek(self, key: str, *, now: Optional[int] = None) -> Decision:
        """What a check of cost 1 would answer now, consuming nothing."""
        name = self.redis_key(check_key(key))
        return _decision(self._run("peek", [name], self._args(_now_arg(now), "1", 1)))

    def forecast(self, key: str, cost: int = 1, *, now: Optional[int] = None) -> Forecast:
        """How many checks of cost would pass now, when the next one will, and when key is full."""
        name = self.redis_key(check_key(key))
        args = self._args(_now_arg(now), "1", _check_cost(cost, self.strategy.ceiling, self.policy_name))
        v = self._run("forecast", [name], args)
        return Forecast(spendable_now=int(v[0]), next_replenish_at=int(v[1]), full_at=int(v[2]))

    def refund(self, key: str, cost: int, *, now: Optional[int] = None) -> None:
        """Gives cost units back to key, never past the ceiling (sliding windows: from the newest)."""
        name = self.redis_key(check_key(key))
        args = self._args(_now_arg(now), "0", _check_cost(cost, _MAX_INT64, self.policy_name))
        self._run("refund", [name], args)

    def reset(self, key: str) -> None:
        """Forgets key: its next check starts from a full budget."""
        name = self.redis_key(check_key(key))
        try:
            self._client.delete(name)
        except Exception as err:  # noqa: BLE001 - any client failure is the store's
            raise self._unavailable(err) from err

    # -- running scripts --------------------------------------------------------------------------

    def _args(self, now: int, per_group: str, cost: int) -> List[str]:
        """ARGV of a general script: now, slack, give-up, steps per group, the limit, one step pair."""
        limit = self._limit_args or ("1", *self.strategy.script_params(now))
        return [str(now), self._slack, "0", per_group, *limit, "1", str(cost)]

    def _give_up(self) -> str:
        """ARGV[3] of a check: the instant to give up on this host's clock (Go's giveUpAt), "0"
        for none."""
        if self.timeout_ms is None:
            return "0"
        margin = min(self.timeout_ms / 8, 50.0)
        return str(max(math.floor(time.time() * 1000 + self.timeout_ms - margin), 1))

    def _run(self, op: str, keys: List[str], args: List[str]) -> List[int]:
        """Runs op's general script: EVALSHA once loaded, EVAL where Redis lost it."""
        sc = _script(op, self.strategy.letter)
        try:
            if sc.sha not in self._loaded:
                self._load(sc)
            try:
                reply = self._client.evalsha(sc.sha, len(keys), *keys, *args)
            except Exception as err:  # noqa: BLE001
                if not _no_script(err):
                    raise
                reply = self._client.eval(sc.source, len(keys), *keys, *args)
        except ServiceUnavailableError:
            raise
        except Exception as err:  # noqa: BLE001 - connection, timeout, script error: unavailable
            raise self._unavailable(err) from err
        return _ints(reply)

    def _load(self, sc: _Script) -> None:
        """SCRIPT LOAD sc, and check that Redis knows it by the SHA-1 computed here."""
        sha = self._client.script_load(sc.source)
        if isinstance(sha, bytes):
            sha = sha.decode()
        if sha != sc.sha:
            raise ServiceUnavailableError(f"sluice: Redis loaded the script as {sha}, not {sc.sha}")
        self._loaded.add(sc.sha)

    def _unavailable(self, err: BaseException) -> ServiceUnavailableError:
        return ServiceUnavailableError(f"sluice: redis store: {type(err).__name__}: {err}")


def _no_script(err: BaseException) -> bool:
    """Whether err is Redis's NOSCRIPT answer (redis-py's NoScriptError, or its message)."""
    return type(err).__name__ == "NoScriptError" or str(err).startswith("NOSCRIPT")


def _ints(reply: object) -> List[int]:
    """A script's reply, an array of integers."""
    if not isinstance(reply, list) or not all(isinstance(x, int) for x in reply):
        raise ServiceUnavailableError(f"sluice: unexpected script reply {reply!r}")
    return reply
