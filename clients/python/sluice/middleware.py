"""WSGI and ASGI middleware: one check per request, answered as sluice's Go middleware answers it.

The model: each request is charged cost units of policy under a key taken from the request (a
header, the client address, or a function of the request). An allowed request goes on to the app
with the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers) added to its answer; a
denied one is answered here, 429 with Retry-After and a problem+json body. The fields are those
Go's middleware writes when it has no policy at hand (middleware.SetHeaders, header.Format):

    RateLimit-Policy: "<policy>";q=<limit>[;w=<window, seconds>]
    RateLimit: "<policy>";r=<remaining>;t=<seconds until reset_at, rounded up>

A fail-open decision (no limit consulted) sets Sluice-Fail-Mode: open and no RateLimit fields. A
check the backend refuses with ServiceUnavailableError (fail mode closed) is a 503 with
Sluice-Fail-Mode: closed; a request with no key is a 400.

The backend is anything with check(policy, key, cost) returning a Decision: ServiceBackend,
HttpBackend, or an object of your own; or a RedisBackend, which holds its one policy (its
policy_name) and is asked check(key, cost). The ASGI middleware awaits check when it is
a coroutine function, and otherwise runs it in the loop's default executor.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any, Awaitable, Callable, Iterable, List, Mapping, MutableMapping, Optional, Tuple, Union, cast

from ._types import MAX_KEY_LEN, Decision
from .errors import ServiceUnavailableError

__all__ = ["WSGIMiddleware", "ASGIMiddleware", "rate_limit_headers", "retry_after"]

FAIL_MODE_HEADER = "Sluice-Fail-Mode"

Headers = List[Tuple[str, str]]
# A key: a header name (str), None for the client address, or a function of the request (the WSGI
# environ or the ASGI scope) returning the key, or None when the request carries none.
KeySpec = Union[None, str, Callable[[Any], Optional[str]]]
CostSpec = Union[int, Callable[[Any], int]]


class _NoKey(Exception):
    """The request carries nothing to rate-limit it by (Go's middleware.ErrNoKey)."""


def _ceil_seconds(ms: int) -> int:
    """ms in whole seconds, rounded up; 0 when ms is not positive."""
    return max(-(-ms // 1000), 0)


def _quote(name: str) -> str:
    """name as a structured-field string: '"' and '\\' escaped, any byte not printable ASCII '?'."""
    out = ['"']
    for b in name.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif b < 0x20 or b > 0x7E:
            out.append("?")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def retry_after(d: Decision) -> str:
    """The Retry-After value of a denial: retry_after_ms in seconds, rounded up, at least 1."""
    return str(max(_ceil_seconds(max(d.retry_after_ms, 0)), 1))


def rate_limit_headers(policy: str, d: Decision, now_ms: int, window_ms: float = 0) -> Headers:
    """The header fields Go's middleware sets for d, a decision of policy taken at now_ms, when
    it does not know the policy's shape: RateLimit-Policy and RateLimit, and Retry-After on a
    denial; none for a decision without numbers (limit 0, as a fail-open one). window_ms, when
    positive, adds w (seconds, rounded to the nearest, at least 1)."""
    if d.limit <= 0:
        return []
    name = _quote(policy)
    pol = f"{name};q={max(d.limit, 0)}"
    if window_ms > 0:
        ns = round(window_ms * 1_000_000)
        pol += f";w={max((ns + 500_000_000) // 1_000_000_000, 1)}"
    cur = f"{name};r={max(d.remaining, 0)};t={_ceil_seconds(d.reset_at - now_ms)}"
    out = [("RateLimit-Policy", pol), ("RateLimit", cur)]
    if not d.allowed:
        out.append(("Retry-After", retry_after(d)))
    return out


def _problem(status: int, title: str, detail: str, retry_after_ms: int = 0) -> bytes:
    """A problem+json body (RFC 9457) as Go's middleware writes it, newline included."""
    p = {"type": "about:blank", "title": title, "status": status, "detail": detail, "retryAfterMs": retry_after_ms}
    return (json.dumps(p, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")


def _denied(policy: str, d: Decision) -> bytes:
    return _problem(429, "Too Many Requests", f"rate limit {json.dumps(policy, ensure_ascii=False)} exceeded; retry in {retry_after(d)} s", d.retry_after_ms)


_NO_KEY = _problem(400, "Bad Request", "the request carries nothing to rate-limit it by")
_UNAVAILABLE = _problem(503, "Service Unavailable", "the rate limiter is unavailable")
_FAILED = _problem(500, "Internal Server Error", "the rate limit could not be checked")
_PROBLEM_HEADERS = [("Content-Type", "application/problem+json"), ("X-Content-Type-Options", "nosniff")]


def _valid_key(key: Optional[str], source: str) -> str:
    """key if it can be checked, else _NoKey (absent, empty, or longer than MAX_KEY_LEN bytes)."""
    if not key:
        raise _NoKey(f"no {source}")
    if len(key.encode("utf-8", "surrogateescape")) > MAX_KEY_LEN:
        raise _NoKey(f"the {source} is longer than {MAX_KEY_LEN} bytes")
    return key


class _Gate:
    """What both middlewares share: the options, and the answer to one decision."""

    def __init__(
        self,
        backend: Any,
        policy: str,
        key: KeySpec,
        cost: CostSpec,
        window: float,
        clock: Optional[Callable[[], int]],
    ) -> None:
        if not policy:
            raise ValueError("sluice middleware: a policy is needed")
        if not callable(getattr(backend, "check", None)):
            raise TypeError("sluice middleware: the backend needs a check(policy, key, cost) method")
        self.backend = backend
        # A RedisBackend holds its one policy: ask it check(key, cost).
        self.check: Callable[[str, str, int], Any] = backend.check
        if getattr(backend, "policy_name", None) is not None:
            self.check = lambda _policy, key, cost: backend.check(key, cost)
        self.policy = policy
        self.key = key
        self.cost = cost
        self.window_ms = window * 1000.0
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)

    def cost_of(self, request: Any) -> int:
        return self.cost(request) if callable(self.cost) else self.cost

    def answer(self, d: Decision) -> Tuple[Optional[Tuple[int, Headers, bytes]], Headers]:
        """For decision d: the answer to send instead of the app's (None when allowed), and the
        header fields to add to the app's answer."""
        if d.fail_open and d.allowed:
            return None, [(FAIL_MODE_HEADER, "open")]
        fields = rate_limit_headers(self.policy, d, self.clock(), self.window_ms)
        if d.allowed:
            return None, fields
        body = _denied(self.policy, d)
        return (429, fields + _PROBLEM_HEADERS + [("Content-Length", str(len(body)))], body), []

    @staticmethod
    def failure(err: BaseException) -> Tuple[int, Headers, bytes]:
        """The answer to a request whose check failed: 400 without a key, 503 when the limiter is
        unavailable (its fail mode closed), else 500."""
        if isinstance(err, _NoKey):
            status, body, extra = 400, _NO_KEY, []
        elif isinstance(err, ServiceUnavailableError):
            status, body, extra = 503, _UNAVAILABLE, [("Retry-After", "1"), (FAIL_MODE_HEADER, "closed")]
        else:
            status, body, extra = 500, _FAILED, []
        return status, extra + _PROBLEM_HEADERS + [("Content-Length", str(len(body)))], body


def _merge(app_headers: Iterable[Tuple[str, str]], ours: Headers) -> Headers:
    """The app's header fields plus ours, except those the app set itself."""
    out = list(app_headers)
    have = {name.lower() for name, _ in out}
    out.extend((n, v) for n, v in ours if n.lower() not in have)
    return out


_REASONS = {400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


class WSGIMiddleware:
    """Limits a WSGI app: WSGIMiddleware(app, backend, "api", key="X-Api-Key").

    key is a header name, None for the client address (REMOTE_ADDR), or a function of the environ
    returning the key (None or "" when the request carries none: a 400). cost is the units a
    request spends, or a function of the environ. window, in seconds, adds w to RateLimit-Policy.
    clock gives the instant (epoch ms) that t is counted from; the wall clock by default.
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        backend: Any,
        policy: str,
        *,
        key: KeySpec = None,
        cost: CostSpec = 1,
        window: float = 0,
        clock: Optional[Callable[[], int]] = None,
    ) -> None:
        self.app = app
        self._gate = _Gate(backend, policy, key, cost, window, clock)

    def _key(self, environ: Mapping[str, Any]) -> str:
        spec = self._gate.key
        if spec is None:
            return _valid_key(environ.get("REMOTE_ADDR"), "client address")
        if isinstance(spec, str):
            name = spec.upper().replace("-", "_")
            if name not in ("CONTENT_TYPE", "CONTENT_LENGTH"):  # the two WSGI keeps without HTTP_
                name = "HTTP_" + name
            return _valid_key(environ.get(name), f"{spec} header")
        return _valid_key(spec(environ), "key")

    def __call__(self, environ: MutableMapping[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            key = self._key(environ)
            d = self._gate.check(self._gate.policy, key, self._gate.cost_of(environ))
        except Exception as err:  # noqa: BLE001 - every failure is answered, as Go's OnError does
            return self._send(start_response, self._gate.failure(err))
        denial, fields = self._gate.answer(d)
        if denial is not None:
            return self._send(start_response, denial)

        def start(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            merged = _merge(headers, fields)
            return start_response(status, merged, exc_info) if exc_info is not None else start_response(status, merged)

        return self.app(environ, start)

    @staticmethod
    def _send(start_response: Callable[..., Any], answer: Tuple[int, Headers, bytes]) -> Iterable[bytes]:
        status, headers, body = answer
        start_response(f"{status} {_REASONS[status]}", headers)
        return [body]


ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class ASGIMiddleware:
    """Limits an ASGI app's HTTP requests (other scopes pass through):
    ASGIMiddleware(app, backend, "api", key="x-api-key").

    key is a header name, None for the client address (scope["client"]), or a function of the
    scope returning the key (None or "" when the request carries none: a 400). cost, window and
    clock are WSGIMiddleware's.
    """

    def __init__(
        self,
        app: ASGIApp,
        backend: Any,
        policy: str,
        *,
        key: KeySpec = None,
        cost: CostSpec = 1,
        window: float = 0,
        clock: Optional[Callable[[], int]] = None,
    ) -> None:
        self.app = app
        self._gate = _Gate(backend, policy, key, cost, window, clock)

    def _key(self, scope: Mapping[str, Any]) -> str:
        spec = self._gate.key
        if spec is None:
            client = scope.get("client")
            return _valid_key(client[0] if client else None, "client address")
        if isinstance(spec, str):
            want = spec.lower().encode("latin-1")
            for name, value in scope.get("headers") or ():
                if name.lower() == want:
                    return _valid_key(value.decode("latin-1"), f"{spec} header")
            return _valid_key(None, f"{spec} header")
        return _valid_key(spec(scope), "key")

    async def _check(self, key: str, cost: int) -> Decision:
        check = self._gate.check
        if inspect.iscoroutinefunction(check):
            d = await check(self._gate.policy, key, cost)
        else:
            d = await asyncio.get_running_loop().run_in_executor(None, check, self._gate.policy, key, cost)
        return cast(Decision, d)

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        try:
            key = self._key(scope)
            d = await self._check(key, self._gate.cost_of(scope))
        except Exception as err:  # noqa: BLE001 - every failure is answered, as Go's OnError does
            await self._send(send, self._gate.failure(err))
            return
        denial, fields = self._gate.answer(d)
        if denial is not None:
            await self._send(send, denial)
            return
        raw = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in fields]

        async def wrapped(message: Any) -> None:
            if message.get("type") == "http.response.start" and raw:
                headers = list(message.get("headers") or ())
                have = {bytes(n).lower() for n, _ in headers}
                headers.extend((n, v) for n, v in raw if n not in have)
                message = dict(message, headers=headers)
            await send(message)

        await self.app(scope, receive, wrapped)

    @staticmethod
    async def _send(send: Callable[[Any], Awaitable[None]], answer: Tuple[int, Headers, bytes]) -> None:
        status, headers, body = answer
        raw = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})
