"""The answers of every door: Decision, Forecast, and the Item of check_all."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from .errors import InvalidArgumentError


@dataclass(frozen=True)
class Decision:
    """The answer to one check, as sluice.Decision in Go (docs/semantics.md).

    Instants are epoch milliseconds and durations milliseconds, on every door.
    """

    allowed: bool
    limit: int = 0
    remaining: int = 0
    reset_at: int = 0
    retry_after_ms: int = 0
    # The index in parts of the part that denied, -1 when allowed (0 for a denied single limit).
    denied_by: int = -1
    parts: Tuple["Decision", ...] = field(default_factory=tuple)
    # No limit was consulted: the store (or the service) could not answer and the fail mode allowed.
    fail_open: bool = False
    # The key has an override: its plan or limits applied instead of the policy as configured.
    override: bool = False
    # The plan the key was checked under, for a policy with plans.
    plan: str = ""

    @property
    def retry_after(self) -> float:
        """retry_after_ms in seconds."""
        return self.retry_after_ms / 1000.0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Decision":
        """A decision from its JSON wire form (the HTTP API's)."""
        allowed = bool(d.get("allowed", False))
        return cls(
            allowed=allowed,
            limit=int(d.get("limit", 0)),
            remaining=int(d.get("remaining", 0)),
            reset_at=int(d.get("resetAt", 0)),
            retry_after_ms=int(d.get("retryAfterMs", 0)),
            denied_by=int(d.get("deniedBy", -1 if allowed else 0)),
            parts=tuple(cls.from_json(p) for p in d.get("parts") or ()),
            fail_open=bool(d.get("failOpen", False)),
            override=bool(d.get("override", False)),
            plan=str(d.get("plan", "")),
        )


@dataclass(frozen=True)
class Forecast:
    """A projection of a key's capacity that consumes nothing, as sluice.Forecast in Go."""

    spendable_now: int
    next_replenish_at: int
    full_at: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Forecast":
        return cls(int(d.get("spendableNow", 0)), int(d.get("nextReplenishAt", 0)), int(d.get("fullAt", 0)))


@dataclass(frozen=True)
class Item:
    """One (policy, key, cost) check of check_all."""

    policy: str
    key: str
    cost: int = 1


def combine(parts: Sequence[Decision]) -> Decision:
    """Fold the decisions of parts checked together, all or nothing, into one (Go's sluice.Combine).

    Allowed only if every part allowed. The binding part is, when allowed, the one with the least
    remaining; when denied, the denying part with the longest retry (ties: least remaining, then
    lowest index). The result is the binding part's numbers, denied_by its index when denied, and
    parts the parts themselves.
    """
    bind, allowed = -1, True
    for i, d in enumerate(parts):
        if not d.allowed:
            if allowed:
                allowed, bind = False, i
                continue
            b = parts[bind]
            if d.retry_after_ms > b.retry_after_ms or (d.retry_after_ms == b.retry_after_ms and d.remaining < b.remaining):
                bind = i
            continue
        if allowed and (bind < 0 or d.remaining < parts[bind].remaining):
            bind = i
    if bind < 0:
        return Decision(allowed=True, parts=tuple(parts))
    return replace(parts[bind], parts=tuple(parts), denied_by=-1 if allowed else bind)


# The longest key, in bytes (UTF-8), that a check accepts: sluice.MaxKeyLen in Go.
MAX_KEY_LEN = 1024
# The most keys of check_many, or items of check_all, one call may carry (the service's MaxBatch).
MAX_BATCH = 1000
# What a check answers when the service cannot: "open" allows (fail_open set), "closed" raises.
FAIL_MODES = ("open", "closed")


def check_key(key: object, field_name: str = "key") -> str:
    """key itself if it is a str of 1 to MAX_KEY_LEN bytes of UTF-8, else InvalidArgumentError naming field_name."""
    if not isinstance(key, str):
        raise InvalidArgumentError(field_name, f"must be a string, got {type(key).__name__}")
    if key == "":
        raise InvalidArgumentError(field_name, "must not be empty")
    try:
        n = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(field_name, "is not valid UTF-8 (it holds an unpaired surrogate)") from None
    if n > MAX_KEY_LEN:
        raise InvalidArgumentError(field_name, f"is {n} bytes, more than {MAX_KEY_LEN}")
    return key


def check_cost(cost: object, field_name: str = "cost") -> int:
    """cost itself if it is an int of at least 1, else InvalidArgumentError naming field_name.

    The service reads a cost of 0 as 1 (proto3 cannot tell 0 from absent); checking here keeps a
    0 from being silently charged as 1. The ceiling is the policy's, which only the service knows.
    """
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise InvalidArgumentError(field_name, f"must be an integer, got {type(cost).__name__}")
    if cost < 1:
        raise InvalidArgumentError(field_name, f"must be at least 1, got {cost}")
    return cost


def check_policy(policy: object) -> str:
    """policy itself if it is a non-empty str, else InvalidArgumentError naming "policy"."""
    if not isinstance(policy, str) or policy == "":
        raise InvalidArgumentError("policy", "must be a non-empty string")
    return policy


def check_now(now: Optional[int]) -> int:
    """The instant to send: now (epoch ms) when given, 0 (the service's clock) when None."""
    if now is None:
        return 0
    if isinstance(now, bool) or not isinstance(now, int) or now < 0:
        raise InvalidArgumentError("now", f"must be epoch milliseconds (an int, not negative), got {now!r}")
    return now


def check_items(items: Sequence[Item]) -> List[Item]:
    """The items of a check_all, each checked locally; InvalidArgumentError names items[i].field."""
    items = list(items)
    if not items:
        raise InvalidArgumentError("items", "at least one item is needed")
    if len(items) > MAX_BATCH:
        raise InvalidArgumentError("items", f"{len(items)} items, at most {MAX_BATCH} per request")
    for i, it in enumerate(items):
        if not isinstance(it, Item):
            raise InvalidArgumentError(f"items[{i}]", f"must be a sluice.Item, got {type(it).__name__}")
        if not isinstance(it.policy, str) or it.policy == "":
            raise InvalidArgumentError(f"items[{i}].policy", "must be a non-empty string")
        check_key(it.key, f"items[{i}].key")
        check_cost(it.cost, f"items[{i}].cost")
    return items


def check_keys(keys: Sequence[str]) -> List[str]:
    """The keys of a check_many, each checked locally; InvalidArgumentError names keys[i]."""
    if isinstance(keys, str):
        raise InvalidArgumentError("keys", "must be a sequence of keys, not one string")
    keys = list(keys)
    if len(keys) > MAX_BATCH:
        raise InvalidArgumentError("keys", f"{len(keys)} keys, at most {MAX_BATCH} per request")
    for i, k in enumerate(keys):
        check_key(k, f"keys[{i}]")
    return keys


def check_fail_mode(mode: str) -> str:
    """mode itself if it is one of FAIL_MODES, else InvalidArgumentError naming "fail_mode"."""
    if mode not in FAIL_MODES:
        raise InvalidArgumentError("fail_mode", f'must be "open" or "closed", got {mode!r}')
    return mode


def fail_open_decision() -> Decision:
    """The decision of a check the client's fail mode allowed: no limit consulted, every number zero."""
    return Decision(allowed=True, fail_open=True)


_INVALID = re.compile(r"invalid ([A-Za-z0-9_.\[\]]+): (.*)", re.DOTALL)
_API_FIELD = re.compile(r"^httpapi: ([A-Za-z0-9_.\[\]]+): (.*)", re.DOTALL)


def invalid_from(message: str) -> InvalidArgumentError:
    """The InvalidArgumentError of a service's message: "... invalid FIELD: reason" (the limiter's),
    or "httpapi: FIELD: reason" (the HTTP API's own decoding), else field "request"."""
    for pattern in (_INVALID, _API_FIELD):
        m = pattern.search(message)
        if m:
            return InvalidArgumentError(m.group(1), m.group(2))
    return InvalidArgumentError("request", message)
