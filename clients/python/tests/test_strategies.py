"""The strategies: validated as the Go library validates them, built from their wire specs.

The table is checked twice: against what Python must answer (the field named), and, when a Go
toolchain is at hand, against the Go library itself (clients/gointerop/validate runs
conformance.ParseStrategy and sluice.NewPolicy on the same specs): the same specs valid, the same
parameter named, the same ceiling and header window.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sluice.errors import InvalidArgumentError  # noqa: E402
from sluice.strategies import (  # noqa: E402
    FixedWindow,
    Gcra,
    SlidingWindow,
    SlidingWindowLog,
    Strategy,
    TokenBucket,
    from_spec,
)

REPO = Path(__file__).resolve().parents[3]
P53 = 2**53

# (spec, the field Python names or None when valid). Every spec is JSON, so Go can read it too.
TABLE: List[Tuple[Dict[str, Any], Optional[str]]] = [
    # GCRA: limit > 0, periodMs >= 1, burst >= 1, all <= 2^53; periodMs/limit >= 0.001 ms and
    # periodMs/limit*burst <= 2^53 ms, both reported on limit.
    ({"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3}, None),
    ({"kind": "gcra", "limit": 0.5, "periodMs": 1, "burst": 1}, None),
    ({"kind": "gcra", "limit": 100, "periodMs": 60000, "burst": 20}, None),
    ({"kind": "gcra", "limit": 0, "periodMs": 1000, "burst": 3}, "limit"),
    ({"kind": "gcra", "limit": -1, "periodMs": 1000, "burst": 3}, "limit"),
    ({"kind": "gcra", "limit": P53 + 2, "periodMs": 1000, "burst": 3}, "limit"),
    ({"kind": "gcra", "limit": 3, "periodMs": 0.5, "burst": 3}, "periodMs"),
    ({"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 0.5}, "burst"),
    ({"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 1.5}, None),
    ({"kind": "gcra", "limit": 1001, "periodMs": 1, "burst": 1}, "limit"),  # T < 0.001 ms
    ({"kind": "gcra", "limit": 1000, "periodMs": 1, "burst": 1}, None),  # T = 0.001 ms
    ({"kind": "gcra", "limit": 1, "periodMs": P53, "burst": 2}, "limit"),  # T * burst > 2^53
    ({"kind": "gcra", "limit": 1, "periodMs": P53, "burst": 1}, None),
    ({"kind": "gcra", "limit": 0, "periodMs": 0, "burst": 0}, "limit"),  # the first bad one
    ({"kind": "gcra", "limit": 3, "periodMs": 0, "burst": 0}, "periodMs"),
    # Token bucket: capacity >= 1, refillPerSec > 0; refilling capacity within 2^53 ms.
    ({"kind": "tokenBucket", "capacity": 10, "refillPerSec": 5}, None),
    ({"kind": "tokenBucket", "capacity": 100, "refillPerSec": 1.6666666666666667}, None),
    ({"kind": "tokenBucket", "capacity": 0.5, "refillPerSec": 5}, "capacity"),
    ({"kind": "tokenBucket", "capacity": 10, "refillPerSec": 0}, "refillPerSec"),
    ({"kind": "tokenBucket", "capacity": 10, "refillPerSec": -2}, "refillPerSec"),
    ({"kind": "tokenBucket", "capacity": P53, "refillPerSec": 0.5}, "refillPerSec"),
    ({"kind": "tokenBucket", "capacity": P53, "refillPerSec": 1000}, None),
    ({"kind": "tokenBucket", "capacity": 2.5, "refillPerSec": 1e-9}, None),
    # Fixed window: limit >= 1, windowMs >= 1.
    ({"kind": "fixedWindow", "limit": 10, "windowMs": 1000}, None),
    ({"kind": "fixedWindow", "limit": 1.5, "windowMs": 1.5}, None),
    ({"kind": "fixedWindow", "limit": 0, "windowMs": 1000}, "limit"),
    ({"kind": "fixedWindow", "limit": 10, "windowMs": 0.9}, "windowMs"),
    ({"kind": "fixedWindow", "limit": 10, "windowMs": P53 + 2}, "windowMs"),
    ({"kind": "fixedWindow", "limit": 10}, "windowMs"),
    ({"kind": "fixedWindow", "limit": 10, "windowMs": 1000, "timezone": "Europe/Rome"}, "timezone"),
    # Calendar windows: day or month of an IANA zone ("" and "UTC" are UTC; "Local" is refused).
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day"}, None),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "month", "timezone": "Europe/Rome"}, None),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "UTC"}, None),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "Etc/GMT+5"}, None),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "America/Santiago"}, None),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "week"}, "calendar"),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "Day"}, "calendar"),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "windowMs": 1000}, "windowMs"),
    ({"kind": "fixedWindow", "limit": 0, "calendar": "day"}, "limit"),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "Local"}, "timezone"),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "local"}, "timezone"),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "utc"}, "timezone"),
    ({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "../etc/passwd"}, "timezone"),
    # Sliding window: limit >= 1, windowMs >= 1, buckets a whole number from 1 to 4096 and at most
    # windowMs.
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 1000, "buckets": 10}, None),
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 10000, "buckets": 4096}, None),
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 10000, "buckets": 4097}, "buckets"),
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 5, "buckets": 6}, "buckets"),
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 5, "buckets": 5}, None),
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 1000, "buckets": 0}, "buckets"),
    ({"kind": "slidingWindow", "limit": 0.5, "windowMs": 1000, "buckets": 0}, "limit"),
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 0, "buckets": 1}, "windowMs"),
    # Sliding log: limit a whole number >= 1, windowMs >= 1.
    ({"kind": "slidingWindowLog", "limit": 10, "windowMs": 1000}, None),
    ({"kind": "slidingWindowLog", "limit": 10.5, "windowMs": 1000}, "limit"),
    ({"kind": "slidingWindowLog", "limit": 0, "windowMs": 1000}, "limit"),
    ({"kind": "slidingWindowLog", "limit": P53, "windowMs": 1000}, None),
    ({"kind": "slidingWindowLog", "limit": 10, "windowMs": 0.5}, "windowMs"),
]

# Specs Go's JSON decoding refuses before validating (no field of its own): Python names the
# parameter.
REFUSED_BY_TYPE: List[Tuple[Dict[str, Any], str]] = [
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 1000, "buckets": 2.0}, "buckets"),
    ({"kind": "slidingWindow", "limit": 10, "windowMs": 1000, "buckets": 2.5}, "buckets"),
    ({"kind": "gcra", "limit": "3", "periodMs": 1000, "burst": 3}, "limit"),
    ({"kind": "gcra", "limit": True, "periodMs": 1000, "burst": 3}, "limit"),
    ({"kind": "tokenBucket", "capacity": None, "refillPerSec": 1}, "capacity"),
    ({"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3, "rate": 1}, "rate"),
    ({"kind": "fixedWindow", "limit": 3, "window": 1000}, "window"),
    ({"kind": "leakyBucket", "limit": 3}, "kind"),
    ({"limit": 3}, "kind"),
]


def _ids(table: List[Tuple[Dict[str, Any], Any]]) -> List[str]:
    return [json.dumps(spec, separators=(",", ":")) for spec, _ in table]


@pytest.mark.parametrize("spec,field", TABLE, ids=_ids(TABLE))
def test_validation(spec: Dict[str, Any], field: Optional[str]) -> None:
    if field is None:
        s = from_spec(spec)
        assert s.spec() == spec and from_spec(spec["kind"], s.params()) == s
    else:
        with pytest.raises(InvalidArgumentError) as err:
            from_spec(spec)
        assert err.value.field == field
        assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("spec,field", REFUSED_BY_TYPE, ids=_ids(REFUSED_BY_TYPE))
def test_refused_by_type(spec: Dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        from_spec(spec)
    assert err.value.field == field


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400, 2**53 + 2])
@pytest.mark.parametrize(
    "make,field",
    [
        (lambda v: Gcra(v, 1000, 3), "limit"),
        (lambda v: Gcra(3, v, 3), "periodMs"),
        (lambda v: Gcra(3, 1000, v), "burst"),
        (lambda v: TokenBucket(v, 1), "capacity"),
        (lambda v: TokenBucket(10, v), "refillPerSec"),
        (lambda v: FixedWindow(v, 1000), "limit"),
        (lambda v: FixedWindow(10, v), "windowMs"),
        (lambda v: SlidingWindow(v, 1000, 4), "limit"),
        (lambda v: SlidingWindow(10, v, 4), "windowMs"),
        (lambda v: SlidingWindow(10, 1000, v), "buckets"),
        (lambda v: SlidingWindowLog(v, 1000), "limit"),
        (lambda v: SlidingWindowLog(10, v), "windowMs"),
    ],
)
def test_out_of_range(make: Any, field: str, value: float) -> None:
    """NaN, infinities and numbers past 2^53 are refused for every parameter."""
    with pytest.raises(InvalidArgumentError) as err:
        make(value)
    assert err.value.field == field


def test_from_spec_forms() -> None:
    g = Gcra(limit=3, period_ms=1000, burst=3)
    assert from_spec("gcra", {"limit": 3, "periodMs": 1000, "burst": 3}) == g
    assert from_spec("gcra", {"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3}) == g
    assert from_spec({"kind": "gcra", "limit": 3, "periodMs": 1000, "burst": 3}) == g
    with pytest.raises(InvalidArgumentError) as err:
        from_spec("gcra", {"kind": "tokenBucket", "limit": 3, "periodMs": 1000, "burst": 3})
    assert err.value.field == "kind"
    with pytest.raises(InvalidArgumentError) as err:
        from_spec("gcra", {"limit": 3, "periodMs": 1000})
    assert err.value.field == "burst"
    rome = from_spec({"kind": "fixedWindow", "limit": 10000, "calendar": "day", "timezone": "Europe/Rome"})
    assert rome == FixedWindow(10000, calendar="day", timezone="Europe/Rome")
    assert (rome.ceiling, rome.window_ms) == (10000, 0)  # type: ignore[attr-defined]


def test_frozen() -> None:
    g = Gcra(3, 1000, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.limit = 4  # type: ignore[misc]
    assert hash(g) == hash(Gcra(3, 1000, 3))


@pytest.mark.parametrize(
    "strategy,kind,letter,ceiling,window_ms,args",
    [
        (Gcra(100, 60000, 20), "gcra", "g", 20, 12000.0, ("100.0", "60000.0", "20.0", "0", "0", "0")),
        (Gcra(3, 1000, 2.5), "gcra", "g", 2, 833.333334, ("3.0", "1000.0", "2.5", "0", "0", "0")),
        (TokenBucket(100, 100 / 60), "tokenBucket", "t", 100, 60000.0,
         ("100.0", "1.6666666666666667", "0", "0", "0", "0")),
        (FixedWindow(10, 1000), "fixedWindow", "f", 10, 1000.0, ("10.0", "1000.0", "0", "0", "0", "0")),
        (SlidingWindow(10.5, 1000, 4), "slidingWindow", "s", 10, 1000.0, ("10.5", "1000.0", "4", "0", "0", "0")),
        (SlidingWindowLog(7, 900), "slidingWindowLog", "l", 7, 900.0, ("7.0", "900.0", "0", "0", "0", "0")),
    ],
)
def test_derived(strategy: Strategy, kind: str, letter: str, ceiling: int, window_ms: float, args: Tuple[str, ...]) -> None:
    assert (strategy.kind, strategy.letter, strategy.ceiling) == (kind, letter, ceiling)
    assert strategy.window_ms == window_ms  # type: ignore[attr-defined]
    assert strategy.script_params() == (letter, *args)


def _go_validate(specs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """clients/gointerop/validate's answers to specs, one each (its doc states the protocol)."""
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Go toolchain under CI")
        pytest.skip("no Go toolchain")
    lines = "".join(json.dumps(s) + "\n" for s in specs)
    out = subprocess.run([go, "run", "./clients/gointerop/validate"], cwd=REPO, input=lines,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def _go_validity(specs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The validate answers as the table compares them: an answer's fields left out when zero are
    there, field "" for a spec Go's JSON decoding refused (an "error" answer), and the ceiling in
    whole units, as Python's strategies count it (the Go answer's Strategy.Ceiling(), truncated)."""
    answers = []
    for a in _go_validate(specs):
        a = {"field": "", "ceiling": 0, "windowMs": 0.0, **a}
        a["ceiling"] = int(a["ceiling"])
        answers.append(a)
    return answers


def test_go_validates_alike() -> None:
    """Go accepts and refuses the same specs, naming the same parameter, with the same ceiling and
    header window."""
    specs = [spec for spec, _ in TABLE] + [spec for spec, _ in REFUSED_BY_TYPE]
    answers = _go_validity(specs)
    assert len(answers) == len(specs)
    for spec, go in zip(specs, answers):
        try:
            s = from_spec(spec)
        except InvalidArgumentError as err:
            assert not go["ok"], (spec, go)
            assert go["field"] in ("", err.field), (spec, go, err.field)  # "": Go's JSON refused it
            continue
        assert go["ok"], (spec, go)
        assert (s.ceiling, s.window_ms) == (go["ceiling"], go["windowMs"]), spec  # type: ignore[attr-defined]


# Zones with DST at midnight (Santiago, Havana, Beirut: a day starting at 01:00 or lasting 25 h), a
# half-hour DST (Lord Howe), a skipped day (Apia, 2011-12-30), and plain ones.
ZONES = ["", "UTC", "Europe/Rome", "America/Santiago", "America/Havana", "Asia/Beirut",
         "Australia/Lord_Howe", "Pacific/Apia", "America/Sao_Paulo", "Asia/Kolkata"]


def _go_script_bounds(cases: List[Tuple[Dict[str, Any], int]]) -> List[Dict[str, Any]]:
    """For each (spec, now) of a fixed window, {"bounds": [b0, b1, b2, b3]}, the bounds the Redis
    store's calendarBounds sends its scripts for a call at now, from Go's FixedWindow.Bounds as it
    computes them: the window holding now, then the windows holding its start - 1 and its end (a
    second run of clients/gointerop/validate); or {"error": ...} when Go answered one."""
    held = _go_validate([{**spec, "now": now} for spec, now in cases])
    assert len(held) == len(cases)
    around = _go_validate([{**spec, "now": n} for (spec, _), a in zip(cases, held) if "bounds" in a
                           for n in (int(a["bounds"][0]) - 1, int(a["bounds"][1]))])
    assert len(around) == 2 * sum("bounds" in a for a in held)
    out: List[Dict[str, Any]] = []
    neighbours = iter(around)
    for a in held:
        if "bounds" not in a:
            out.append({"error": a.get("error", a)})
            continue
        before, after = next(neighbours), next(neighbours)
        if "bounds" not in before or "bounds" not in after:
            out.append({"error": (before, after)})
            continue
        out.append({"bounds": [before["bounds"][0], *a["bounds"], after["bounds"][1]]})
    return out


def test_calendar_bounds_as_go() -> None:
    """The bounds sent to the scripts for a calendar window equal Go's, across zones and years."""
    cases: List[Tuple[Dict[str, Any], int]] = []
    lines, want = [], []
    for zone in ZONES:
        for calendar in ("day", "month"):
            spec: Dict[str, Any] = {"kind": "fixedWindow", "limit": 10, "calendar": calendar}
            if zone:
                spec["timezone"] = zone
            s = from_spec(spec)
            # Every 29 h 17 min 17 s from 2010 to 2026, and days after midnights that DST skips
            # (Santiago 2010-10-10, Havana 2012-03-11, Beirut 2019-03-31) or that Apia skipped.
            for now in [*range(1_262_304_000_000, 1_767_225_600_000, 105_437_000),
                        1_286_712_000_000, 1_331_467_200_000, 1_554_033_600_000, 1_325_332_800_000]:
                cases.append((spec, now))
                lines.append(json.dumps({"spec": spec, "now": now}))
                want.append(s.script_params(now))
    out = _go_script_bounds(cases)
    assert len(out) == len(lines)
    for line, got, params in zip(lines, out, want):
        assert "error" not in got, (line, got)
        assert [float(x) for x in params[3:]] == got["bounds"], line
