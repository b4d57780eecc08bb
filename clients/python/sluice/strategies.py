"""The five strategies of sluice, as the Go library defines and validates them (policy.go).

A strategy is one rate-limiting algorithm with its parameters. Each is a frozen dataclass whose
constructor validates exactly as the Go library's ``validate`` methods do: the same ranges, the same
whole-number rules and the same float64 arithmetic for the derived bounds, raising
:class:`~sluice.errors.InvalidArgumentError` whose ``field`` is the parameter's wire name
(``limit``, ``periodMs``, ``burst``, ``capacity``, ``refillPerSec``, ``windowMs``, ``buckets``), the
names the conformance vectors and the service's configuration use.

Parameters are numbers (``int`` or ``float``, as Go's ``float64``) unless said otherwise: only a
sliding window's ``buckets`` and a sliding log's ``limit`` must be whole. Every strategy also says

* ``kind``: its wire name (``gcra``, ``tokenBucket``, ``fixedWindow``, ``slidingWindow``,
  ``slidingWindowLog``), and ``letter``: its letter in the Redis store's scripts (g t f s l);
* ``ceiling``: the most units one check can ever be admitted for, as ``Decision.limit`` reports it
  (GCRA: the burst; token bucket: the capacity; the windows: the limit), truncated to an integer as
  Go's ``int64(Ceiling())`` is;
* ``window_ms``: the time in which it gives back its whole ceiling, as Go's ``header.Window``
  computes it (``periodMs / limit * burst`` for GCRA, ``capacity / refillPerSec * 1000`` for a token
  bucket, ``windowMs`` for the windows): with ``ceiling``, what ``RateLimit-Policy``'s ``q`` and
  ``w`` carry.

:func:`from_spec` builds one from its wire form, ``{"kind": "gcra", "limit": 3, "periodMs": 1000,
"burst": 3}``.
"""

from __future__ import annotations

import math
import time
from datetime import date, datetime, timedelta, timezone, tzinfo
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Tuple, Union

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import InvalidArgumentError

__all__ = [
    "Strategy",
    "Gcra",
    "TokenBucket",
    "FixedWindow",
    "SlidingWindow",
    "SlidingWindowLog",
    "from_spec",
    "MAX_PARAM",
]

Number = Union[int, float]

#: Every numeric parameter is at most 2^53: past it a float64 no longer counts whole units.
MAX_PARAM = float(1 << 53)

# The longest time.Duration, in ns: header.Window's cap.
_MAX_DURATION_NS = (1 << 63) - 1

#: The most buckets a sliding window may have.
MAX_BUCKETS = 4096


def _number(field: str, value: object) -> float:
    """value as the float64 Go holds, or InvalidArgumentError if it is not a real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(field, f"must be a number, got {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int past the largest double
        raise InvalidArgumentError(field, f"must be at most 2^53, got {value!r}") from None


def _positive(field: str, value: object) -> float:
    """Go's positive(): above 0 and at most 2^53 (NaN fails)."""
    v = _number(field, value)
    if not (v > 0 and v <= MAX_PARAM):
        raise InvalidArgumentError(field, f"must be above 0 and at most 2^53, got {value!r}")
    return v


def _at_least(field: str, value: object, lo: float) -> float:
    """Go's atLeast(): from lo to 2^53 (NaN fails)."""
    v = _number(field, value)
    if not (v >= lo and v <= MAX_PARAM):
        raise InvalidArgumentError(field, f"must be from {lo:g} to 2^53, got {value!r}")
    return v


def _whole(field: str, value: object) -> int:
    """value, if it is a Go int: an int (not a bool, nor a float, which Go's JSON refuses too)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(field, f"must be a whole number, got {value!r}")
    return value


def _arg(x: float) -> str:
    """A number as a script argument: printed so that Lua's tonumber reads back the same double."""
    return repr(float(x))


def _header_window_ms(ms: float) -> float:
    """header.Window's rounding: ms rounded up to a whole nanosecond; 0 when not positive."""
    if math.isnan(ms) or not (ms > 0):
        return 0.0
    if ms * 1e6 >= _MAX_DURATION_NS:
        return _MAX_DURATION_NS / 1e6
    return math.ceil(ms * 1e6) / 1e6


class Strategy:
    """What every strategy is: a kind, a letter, a ceiling, a header window and its parameters."""

    kind: ClassVar[str]
    letter: ClassVar[str]

    @property
    def ceiling(self) -> int:
        """The most units one check can ever be admitted for (Decision.limit)."""
        raise NotImplementedError

    def params(self) -> Dict[str, Number]:
        """The parameters by their wire names, as from_spec takes them."""
        raise NotImplementedError

    #: A calendar fixed window's calendar ("day", "month"); empty for every other strategy, whose
    #: script_params do not depend on the instant.
    calendar: str = ""

    def script_params(self, now: int = 0) -> Tuple[str, ...]:
        """The letter and six parameters a Redis script reads for this limit (docs/redis.md), for
        a call at now (epoch ms; 0: this process's clock), which only calendar windows read."""
        raise NotImplementedError

    def spec(self) -> Dict[str, Any]:
        """The wire form: {"kind": ..., parameters...}."""
        return {"kind": self.kind, **self.params()}


def _padded(letter: str, *args: str) -> Tuple[str, ...]:
    """letter and args, then "0" up to six parameters."""
    return (letter, *args) + ("0",) * (6 - len(args))


@dataclass(frozen=True)
class Gcra(Strategy):
    """GCRA: ``limit`` cells per ``period_ms``, with ``burst`` cells of headroom.

    A key's state is one instant, its theoretical arrival time (TAT); a check of cost c moves it c
    emission intervals (``period_ms / limit``) later and passes if the TAT stays within ``burst``
    intervals of now. The ceiling of a check is the burst.
    """

    kind: ClassVar[str] = "gcra"
    letter: ClassVar[str] = "g"
    limit: Number
    period_ms: Number
    burst: Number

    def __post_init__(self) -> None:
        limit = _positive("limit", self.limit)
        period = _at_least("periodMs", self.period_ms, 1)
        burst = _at_least("burst", self.burst, 1)
        t = period / limit
        if t < 0.001 or t * burst > MAX_PARAM:
            raise InvalidArgumentError(
                "limit",
                f"periodMs/limit must be at least 0.001 ms and periodMs/limit*burst at most 2^53 ms, got {t!r} ms",
            )

    @property
    def ceiling(self) -> int:
        return int(float(self.burst))

    @property
    def window_ms(self) -> float:
        """The time to refill the burst: periodMs / limit * burst."""
        return _header_window_ms(float(self.period_ms) / float(self.limit) * float(self.burst))

    def params(self) -> Dict[str, Number]:
        return {"limit": self.limit, "periodMs": self.period_ms, "burst": self.burst}

    def script_params(self, now: int = 0) -> Tuple[str, ...]:
        return _padded("g", _arg(self.limit), _arg(self.period_ms), _arg(self.burst))


@dataclass(frozen=True)
class TokenBucket(Strategy):
    """Token bucket: up to ``capacity`` tokens, refilled at ``refill_per_sec`` tokens a second.

    A check of cost c passes if the bucket holds c tokens, and spends them. 100 a minute is
    ``refill_per_sec=100/60``. The ceiling of a check is the capacity.
    """

    kind: ClassVar[str] = "tokenBucket"
    letter: ClassVar[str] = "t"
    capacity: Number
    refill_per_sec: Number

    def __post_init__(self) -> None:
        capacity = _at_least("capacity", self.capacity, 1)
        refill = _positive("refillPerSec", self.refill_per_sec)
        fill_ms = capacity / (refill / 1000)
        if fill_ms > MAX_PARAM:
            raise InvalidArgumentError(
                "refillPerSec", f"refilling capacity must take at most 2^53 ms, got {fill_ms!r} ms"
            )

    @property
    def ceiling(self) -> int:
        return int(float(self.capacity))

    @property
    def window_ms(self) -> float:
        """The time to refill an empty bucket: capacity / refillPerSec * 1000."""
        return _header_window_ms(float(self.capacity) / float(self.refill_per_sec) * 1000)

    def params(self) -> Dict[str, Number]:
        return {"capacity": self.capacity, "refillPerSec": self.refill_per_sec}

    def script_params(self, now: int = 0) -> Tuple[str, ...]:
        return _padded("t", _arg(self.capacity), _arg(self.refill_per_sec))


@dataclass(frozen=True)
class FixedWindow(Strategy):
    """Fixed window: ``limit`` units per window of ``window_ms``, aligned to the epoch.

    Or, with ``calendar`` ``"day"`` or ``"month"`` (and ``window_ms`` 0), the calendar days or
    months of ``timezone`` (an IANA name such as ``"Europe/Rome"``; empty is UTC): a day starts at
    local midnight and lasts 23, 24 or 25 hours. The Redis scripts are sent the bounds of three
    calendar windows in a row around the instant of the call (this process's clock when it decides
    at Redis's), computed as Go's ``FixedWindow.Bounds``. The ceiling of a check is the limit.
    """

    kind: ClassVar[str] = "fixedWindow"
    letter: ClassVar[str] = "f"
    limit: Number
    window_ms: Number = 0
    calendar: str = ""
    timezone: str = ""

    def __post_init__(self) -> None:
        _at_least("limit", self.limit, 1)
        if not isinstance(self.calendar, str):
            raise InvalidArgumentError("calendar", f"must be day or month, got {self.calendar!r}")
        if not isinstance(self.timezone, str):
            raise InvalidArgumentError("timezone", f"must be an IANA time zone name, got {self.timezone!r}")
        if self.calendar == "":
            if self.timezone != "":
                raise InvalidArgumentError("timezone", "applies only to calendar windows (calendar day or month)")
            _at_least("windowMs", self.window_ms, 1)
            return
        if self.calendar not in ("day", "month"):
            raise InvalidArgumentError("calendar", f"must be day or month, got {self.calendar!r}")
        if _number("windowMs", self.window_ms) != 0:
            raise InvalidArgumentError("windowMs", f"must be 0 with a calendar window, got {self.window_ms!r}")
        _zone(self.timezone)

    @property
    def ceiling(self) -> int:
        return int(float(self.limit))

    def params(self) -> Dict[str, Any]:
        if self.calendar:
            out: Dict[str, Any] = {"limit": self.limit, "calendar": self.calendar}
            if self.timezone:
                out["timezone"] = self.timezone
            return out
        return {"limit": self.limit, "windowMs": self.window_ms}

    def bounds(self, now: int) -> Tuple[float, float]:
        """The window holding the instant now (epoch ms): its start, included, and end, excluded."""
        if not self.calendar:
            window = float(self.window_ms)
            start = math.floor(float(now) / window) * window
            return start, start + window
        return _calendar_bounds(self.calendar, _zone(self.timezone), now)

    def script_params(self, now: int = 0) -> Tuple[str, ...]:
        if not self.calendar:
            return _padded("f", _arg(self.limit), _arg(self.window_ms))
        if now <= 0:
            now = time.time_ns() // 1_000_000
        start, end = self.bounds(now)
        before, _ = self.bounds(int(start) - 1)
        _, after = self.bounds(int(end))
        return _padded("f", _arg(self.limit), "0", _arg(before), _arg(start), _arg(end), _arg(after))


def _zone(name: str) -> tzinfo:
    """The IANA time zone name, as Go's time.LoadLocation loads it ("" and "UTC": UTC); "Local" is
    refused, as Go refuses it: a fleet's hosts need not share one."""
    if name == "" or name == "UTC":
        return timezone.utc
    if name.lower() == "local":
        raise InvalidArgumentError("timezone", f"must be an IANA time zone such as Europe/Rome, got {name!r}")
    return _load_zone(name)


@lru_cache(maxsize=None)
def _load_zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgumentError("timezone", f"must be an IANA time zone such as Europe/Rome, got {name!r}") from None


_EPOCH = date(1970, 1, 1)


def _offset(zone: tzinfo, unix: int) -> int:
    """zone's offset from UTC at the instant unix (epoch s), in seconds."""
    off = datetime.fromtimestamp(unix, zone).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def _local_midnight_ms(day: date, zone: tzinfo) -> float:
    """The first instant of day in zone, epoch ms, as Go's dayStart finds it.

    Local midnight, read as Go's time.Date reads it (the offset at the local time read as UTC and,
    when that offset is not 0, the offset at the instant it gives); and where a DST change skips
    midnight (Santiago's spring), so that this instant is still the day before, the change: when
    the day's own offset, its noon's, begins."""
    unix = (day - _EPOCH).days * 86400
    off = _offset(zone, unix)
    if off != 0:
        off = _offset(zone, unix - off)
    t = unix - off
    if datetime.fromtimestamp(t, zone).date() != day:
        before = _offset(zone, t)
        t += _offset(zone, unix + 12 * 3600 - before) - before
    return float(t * 1000)


def _calendar_bounds(calendar: str, zone: tzinfo, now: int) -> Tuple[float, float]:
    """Go's FixedWindow.Bounds for a calendar window: the local day or month holding now."""
    local = datetime.fromtimestamp(now // 1000, zone).date()
    if calendar == "month":
        y, m = local.year, local.month
        nxt = date(y + 1, 1, 1) if m == 12 else date(y, m + 1, 1)
        return _local_midnight_ms(date(y, m, 1), zone), _local_midnight_ms(nxt, zone)
    return _local_midnight_ms(local, zone), _local_midnight_ms(local + timedelta(days=1), zone)


@dataclass(frozen=True)
class SlidingWindow(Strategy):
    """Sliding window: ``limit`` units over the trailing ``window_ms``, estimated from ``buckets``.

    The window is split into ``buckets`` sub-windows; the estimate is the full buckets inside the
    window plus the oldest one weighted by how much of it is still inside. ``buckets`` is a whole
    number from 1 to 4096 and at most ``window_ms``. The ceiling of a check is the limit.
    """

    kind: ClassVar[str] = "slidingWindow"
    letter: ClassVar[str] = "s"
    limit: Number
    window_ms: Number
    buckets: int

    def __post_init__(self) -> None:
        _at_least("limit", self.limit, 1)
        window = _at_least("windowMs", self.window_ms, 1)
        buckets = _whole("buckets", self.buckets)
        if buckets < 1 or buckets > MAX_BUCKETS or float(buckets) > window:
            raise InvalidArgumentError(
                "buckets", f"must be from 1 to {MAX_BUCKETS} and at most windowMs, got {self.buckets!r}"
            )

    @property
    def ceiling(self) -> int:
        return int(float(self.limit))

    def params(self) -> Dict[str, Number]:
        return {"limit": self.limit, "windowMs": self.window_ms, "buckets": self.buckets}

    def script_params(self, now: int = 0) -> Tuple[str, ...]:
        return _padded("s", _arg(self.limit), _arg(self.window_ms), str(self.buckets))


@dataclass(frozen=True)
class SlidingWindowLog(Strategy):
    """Sliding window log: ``limit`` units over the trailing ``window_ms``, counted exactly.

    The state logs each instant with the units admitted at it; ``limit`` is a whole number. The
    ceiling of a check is the limit.
    """

    kind: ClassVar[str] = "slidingWindowLog"
    letter: ClassVar[str] = "l"
    limit: Number
    window_ms: Number

    def __post_init__(self) -> None:
        reason = f"must be a whole number from 1 to 2^53 (a log counts whole units), got {self.limit!r}"
        try:
            limit = _at_least("limit", self.limit, 1)
        except InvalidArgumentError:
            raise InvalidArgumentError("limit", reason) from None
        if limit != math.trunc(limit):
            raise InvalidArgumentError("limit", reason)
        _at_least("windowMs", self.window_ms, 1)

    @property
    def ceiling(self) -> int:
        return int(float(self.limit))

    def params(self) -> Dict[str, Number]:
        return {"limit": self.limit, "windowMs": self.window_ms}

    def script_params(self, now: int = 0) -> Tuple[str, ...]:
        return _padded("l", _arg(self.limit), _arg(self.window_ms))


# Each kind's class, its wire parameters (in constructor order) and those a spec must hold.
_KINDS: Dict[str, Tuple[Callable[..., Strategy], Tuple[str, ...], Tuple[str, ...]]] = {
    "gcra": (Gcra, ("limit", "periodMs", "burst"), ("limit", "periodMs", "burst")),
    "tokenBucket": (TokenBucket, ("capacity", "refillPerSec"), ("capacity", "refillPerSec")),
    "fixedWindow": (FixedWindow, ("limit", "windowMs", "calendar", "timezone"), ("limit",)),
    "slidingWindow": (SlidingWindow, ("limit", "windowMs", "buckets"), ("limit", "windowMs", "buckets")),
    "slidingWindowLog": (SlidingWindowLog, ("limit", "windowMs"), ("limit", "windowMs")),
}

# The Python names of wire parameters that differ.
_PY_NAMES = {"periodMs": "period_ms", "refillPerSec": "refill_per_sec", "windowMs": "window_ms"}


def from_spec(kind: Union[str, Mapping[str, Any]], options: Optional[Mapping[str, Any]] = None) -> Strategy:
    """The strategy of a wire spec: ``from_spec("gcra", {"limit": 3, "periodMs": 1000, "burst": 3})``.

    ``kind`` may also be the whole spec, ``{"kind": "gcra", "limit": 3, ...}`` (a vector's
    ``strategy``), and ``options`` may hold ``kind`` too when it agrees. An unknown kind is an
    InvalidArgumentError on ``kind``; an unknown or missing parameter one naming that parameter. A
    fixed window takes ``windowMs``, or ``calendar`` (``day``, ``month``) and ``timezone``.
    """
    kind, opts = _split_spec(kind, options)
    entry = _KINDS.get(kind)
    if entry is None:
        raise InvalidArgumentError("kind", f"must be one of {', '.join(_KINDS)}, got {kind!r}")
    cls, names, required = entry
    for name in opts:
        if name not in names:
            raise InvalidArgumentError(str(name), f"is not a parameter of {kind} (it takes {', '.join(names)})")
    for name in required:
        if name not in opts:
            raise InvalidArgumentError(name, f"is required by {kind}")
    return cls(**{_PY_NAMES.get(name, name): value for name, value in opts.items()})


def _split_spec(
    kind: Union[str, Mapping[str, Any]], options: Optional[Mapping[str, Any]]
) -> Tuple[str, Dict[str, Any]]:
    """The kind and the parameters (without "kind") of from_spec's arguments."""
    if isinstance(kind, Mapping):
        if options is not None:
            raise InvalidArgumentError("options", "must be omitted when the first argument is the whole spec")
        opts = dict(kind)
        kind = opts.get("kind", "")
    else:
        opts = dict(options or {})
    named = opts.pop("kind", kind)
    if named != kind:
        raise InvalidArgumentError("kind", f"options name kind {named!r}, not {kind!r}")
    if not isinstance(kind, str):
        raise InvalidArgumentError("kind", f"must be a string, got {kind!r}")
    return kind, opts
