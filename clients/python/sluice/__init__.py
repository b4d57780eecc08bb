"""sluice's Python client: ask a running sluice serve, or a shared Redis, for rate-limit decisions.

The doors, each returning the same Decision (sluice._types) and raising the same errors
(sluice.errors):

- ServiceBackend: the service's gRPC API (grpc is imported only when it is first used).
- HttpBackend: the service's HTTP JSON API, standard library only.
- RedisBackend with a strategy (Gcra, TokenBucket, FixedWindow, SlidingWindow, SlidingWindowLog,
  from_spec): the direct door, checking in the Redis a sluice fleet shares.

WSGIMiddleware and ASGIMiddleware limit a web app through any of them.

Importing sluice needs no dependency: the gRPC and Redis doors load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._types import MAX_KEY_LEN, Decision, Forecast, Item
from .errors import (
    InvalidArgumentError,
    OperationNotSupportedError,
    PolicyNotFoundError,
    ServiceUnavailableError,
    SluiceError,
    UnauthenticatedError,
)
from .http import HttpBackend
from .middleware import ASGIMiddleware, WSGIMiddleware

if TYPE_CHECKING:
    from .redis import RedisBackend
    from .service import ServiceBackend
    from .strategies import FixedWindow, Gcra, SlidingWindow, SlidingWindowLog, TokenBucket, from_spec

__all__ = [
    "ServiceBackend",
    "HttpBackend",
    "RedisBackend",
    "Gcra",
    "TokenBucket",
    "FixedWindow",
    "SlidingWindow",
    "SlidingWindowLog",
    "from_spec",
    "WSGIMiddleware",
    "ASGIMiddleware",
    "Decision",
    "Forecast",
    "Item",
    "MAX_KEY_LEN",
    "SluiceError",
    "InvalidArgumentError",
    "PolicyNotFoundError",
    "OperationNotSupportedError",
    "ServiceUnavailableError",
    "UnauthenticatedError",
]

# The names loaded on first use, and the module of each: importing sluice must not need grpc or
# a Redis client, nor fail when a door's module is absent.
_LAZY = {
    "ServiceBackend": ".service",
    "RedisBackend": ".redis",
    "Gcra": ".strategies",
    "TokenBucket": ".strategies",
    "FixedWindow": ".strategies",
    "SlidingWindow": ".strategies",
    "SlidingWindowLog": ".strategies",
    "from_spec": ".strategies",
}


def __getattr__(name: str) -> Any:
    """Load a lazy name's module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
