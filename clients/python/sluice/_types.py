"""The answers of every door: Decision, Forecast, and the Item of check_all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Tuple


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
