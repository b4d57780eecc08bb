"""HttpBackend: sluice serve's HTTP JSON API (/v1/check and its siblings) as Python calls.

The model is ServiceBackend's, over the other door: the service decides, this client carries.
Input is checked locally as the Go library checks it (nothing is sent for bad input), each call
is one JSON POST on a kept-alive connection, and the answer becomes a Decision or Forecast, or an
error body {"error","code"} becomes one of sluice.errors.

When the service cannot answer (unreachable, timed out, a 5xx other than 501), the client's fail
mode decides the checks: "open" answers Decision(allowed=True, fail_open=True), "closed" (the
default, as the Go client's) raises ServiceUnavailableError. Peek, forecast, refund and reset always raise. A server's own fail-open
decision ("failOpen" in its answer) is passed through as it came.

Standard library only (http.client and json).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar

from ._types import (
    Decision,
    Forecast,
    Item,
    check_cost,
    check_fail_mode,
    check_items,
    check_key,
    check_keys,
    check_now,
    check_policy,
    combine,
    fail_open_decision,
    invalid_from,
)
from .errors import (
    InvalidArgumentError,
    OperationNotSupportedError,
    PolicyNotFoundError,
    ServiceUnavailableError,
    SluiceError,
    UnauthenticatedError,
)

__all__ = ["HttpBackend"]

T = TypeVar("T")

# The most of an answer read: a check-many of the service's 1000 keys is well below it.
_MAX_BODY = 8 << 20
# Errors of a kept-alive connection the server closed while it idled: nothing was answered, so
# the request is sent once more on a fresh connection.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def _error(status: int, raw: bytes) -> SluiceError:
    """The sluice error of a non-2xx answer, by its code (or, for a body not the API's, its status)."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        body = None
    msg, code = f"HTTP {status}", ""
    if isinstance(body, dict):
        msg = str(body.get("error") or msg)
        code = str(body.get("code") or "")
    if code in ("invalid_argument", "too_large") or status == 400:
        return invalid_from(msg)
    if code == "not_found" or status == 404:
        return PolicyNotFoundError(msg)
    if status in (401, 403):
        return UnauthenticatedError(f"{status} {code}: {msg}")
    if code == "unimplemented" or status == 501:
        return OperationNotSupportedError(msg)
    if code == "unavailable" or status >= 500:
        return ServiceUnavailableError(f"{status}: {msg}")
    return SluiceError(f"{status} {code}: {msg}")


class HttpBackend:
    """A client of sluice serve's HTTP port, such as HttpBackend("http://127.0.0.1:8080").

    base_url is http:// or https://, a host and optionally a path prefix; token, when set, is sent
    as "Authorization: Bearer TOKEN"; timeout bounds connecting and each read, in seconds;
    fail_mode is "open" or "closed" (see the module's doc). Idle connections are kept for reuse;
    the backend is safe to use from several threads (each call takes a connection of its own), and
    is a context manager.

    now, on every call that takes it, is the instant (epoch ms) to decide at, for a server run with
    --allow-client-time; None is the server's clock.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: Optional[str] = None,
        timeout: float = 1.0,
        fail_mode: str = "closed",
    ) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise InvalidArgumentError("base_url", f"want http:// or https:// and a host, got {base_url!r}")
        if u.query or u.fragment:
            raise InvalidArgumentError("base_url", f"must have no query or fragment, got {base_url!r}")
        self._fail_mode = check_fail_mode(fail_mode)
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._timeout = timeout
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def fail_mode(self) -> str:
        """"open" or "closed": what a check answers when the service cannot."""
        return self._fail_mode

    # Connections: a small pool of idle ones, so that sequential calls reuse one keep-alive
    # connection and concurrent calls never share one (http.client is not thread-safe).

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (True: reused) or a new one (False)."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < 16:
                self._idle.append(conn)
                return
        conn.close()

    def _exchange(self, path: str, body: bytes) -> tuple[int, bytes]:
        """POST body to path: the answer's status and body. A stale kept-alive connection is
        replaced once; any other failure to get an answer is ServiceUnavailableError."""
        for attempt in range(2):
            conn, reused = self._take()
            try:
                conn.request("POST", self._prefix + path, body=body, headers=self._headers)
                resp = conn.getresponse()
                data = resp.read(_MAX_BODY)
            except _STALE as err:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise ServiceUnavailableError(f"{path}: {err!r}") from err
            except (OSError, http.client.HTTPException, socket.timeout) as err:
                conn.close()
                raise ServiceUnavailableError(f"{path}: {err!r}") from err
            if resp.will_close or not resp.isclosed():
                conn.close()  # the server ends it, or an answer too long was left unread
            else:
                self._give_back(conn)
            return resp.status, data
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, path: str, payload: Mapping[str, Any]) -> Dict[str, Any]:
        """The JSON object the service answered to payload at path, or its error raised."""
        status, data = self._exchange(path, json.dumps(payload, separators=(",", ":")).encode("utf-8"))
        if not 200 <= status <= 299:
            raise _error(status, data)
        try:
            out = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise SluiceError(f"{path}: the answer is not JSON: {err}") from err
        if not isinstance(out, dict):
            raise SluiceError(f"{path}: the answer is not a JSON object")
        return out

    def _decide(self, call: Callable[[], T], on_fail_open: Callable[[], T]) -> T:
        """call() for a check: when the service cannot answer, the fail mode decides."""
        try:
            return call()
        except ServiceUnavailableError:
            if self._fail_mode == "open":
                return on_fail_open()
            raise

    @staticmethod
    def _body(policy: str, key: str, cost: Optional[int], now: Optional[int]) -> Dict[str, Any]:
        """The body of the single-key routes, their input checked; cost None is a route without one."""
        body: Dict[str, Any] = {"policy": check_policy(policy), "key": check_key(key)}
        if cost is not None:
            body["cost"] = check_cost(cost)
        t = check_now(now)
        if t:
            body["now"] = t
        return body

    def check(self, policy: str, key: str, cost: int = 1, *, now: Optional[int] = None) -> Decision:
        """Consume cost for key under policy, from all of the policy's limits or none."""
        body = self._body(policy, key, cost, now)
        return self._decide(lambda: Decision.from_json(self._post("/v1/check", body)), fail_open_decision)

    def check_many(self, policy: str, keys: Sequence[str], cost: int = 1, *, now: Optional[int] = None) -> List[Decision]:
        """Check each key independently under policy, all at one instant: one decision per key."""
        ks = check_keys(keys)
        body: Dict[str, Any] = {"policy": check_policy(policy), "keys": ks, "cost": check_cost(cost)}
        if check_now(now):
            body["now"] = now

        def call() -> List[Decision]:
            ds = self._post("/v1/check-many", body).get("decisions") or []
            if len(ds) != len(ks):
                raise SluiceError(f"/v1/check-many answered {len(ds)} decisions for {len(ks)} keys")
            return [Decision.from_json(d) for d in ds]

        return self._decide(call, lambda: [fail_open_decision() for _ in ks])

    def check_all(self, items: Sequence[Item], *, now: Optional[int] = None) -> Decision:
        """Check every item together, all or nothing: parts holds one decision per item, denied_by
        the index of the item that denied. The route answers the items' decisions; folding them as
        the service did restores the binding item's numbers, and the service's verdict stands."""
        its = check_items(items)
        body: Dict[str, Any] = {"items": [{"policy": i.policy, "key": i.key, "cost": i.cost} for i in its]}
        if check_now(now):
            body["now"] = now

        def call() -> Decision:
            out = self._post("/v1/check-all", body)
            parts = [Decision.from_json(d) for d in out.get("decisions") or []]
            if len(parts) != len(its):
                raise SluiceError(f"/v1/check-all answered {len(parts)} decisions for {len(its)} items")
            d = combine(parts)
            allowed = bool(out.get("allowed", False))
            denied_by = -1 if allowed else int(out.get("deniedBy", d.denied_by))
            return Decision(
                allowed=allowed, limit=d.limit, remaining=d.remaining, reset_at=d.reset_at,
                retry_after_ms=d.retry_after_ms, denied_by=denied_by, parts=d.parts,
                fail_open=d.fail_open or bool(out.get("failOpen", False)), override=d.override, plan=d.plan,
            )

        def fail_open() -> Decision:
            return Decision(allowed=True, fail_open=True, parts=tuple(fail_open_decision() for _ in its))

        return self._decide(call, fail_open)

    def peek(self, policy: str, key: str, *, now: Optional[int] = None) -> Decision:
        """key's state under policy, consuming nothing: allowed says whether a check of cost 1 would
        pass now, remaining what is left now."""
        return Decision.from_json(self._post("/v1/peek", self._body(policy, key, None, now)))

    def forecast(self, policy: str, key: str, cost: int = 1, *, now: Optional[int] = None) -> Forecast:
        """A projection of key's capacity for checks of cost, consuming nothing."""
        return Forecast.from_json(self._post("/v1/forecast", self._body(policy, key, cost, now)))

    def refund(self, policy: str, key: str, cost: int = 1, *, now: Optional[int] = None) -> None:
        """Give cost units back to key, to the limits that count cost, never past a ceiling."""
        self._post("/v1/refund", self._body(policy, key, cost, now))

    def reset(self, policy: str, key: str) -> None:
        """Forget key under policy: its next check starts from a full budget."""
        self._post("/v1/reset", self._body(policy, key, None, None))

    def close(self) -> None:
        """Close the idle connections; calls after close still work, on fresh connections."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> "HttpBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
