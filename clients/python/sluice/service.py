"""ServiceBackend: sluice serve's native gRPC API (sluice.v1.RateLimiter) as Python calls.

The model: the service decides, this client carries. Every decision comes from the server's
policies and store; the client only checks its input the way the Go library does (so that bad
input never leaves the process), sends one request over one reused channel, and turns the answer
into a Decision or Forecast, or an error into one of sluice.errors.

When the service cannot answer (unreachable, timed out, UNAVAILABLE), the client's fail mode
decides the checks: "open" answers Decision(allowed=True, fail_open=True), "closed" (the default,
as the Go client's) raises ServiceUnavailableError. Peek, forecast, refund and reset admit nothing,
so they always raise. A server's own fail-open decision (fail_open in its answer) is passed
through as it came.

grpc is imported when this module is, which importing sluice alone never does.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar

import grpc

from ._pb import sluice_pb2 as pb
from ._pb import sluice_pb2_grpc as pb_grpc
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
    fail_open_decision,
    invalid_from,
)
from .errors import (
    OperationNotSupportedError,
    PolicyNotFoundError,
    ServiceUnavailableError,
    SluiceError,
    UnauthenticatedError,
)

__all__ = ["ServiceBackend"]

T = TypeVar("T")

# The codes that mean the service could not answer: the fail mode decides a check.
_UNAVAILABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL})


def _decision(m: Any) -> Decision:
    """A Decision from a sluice.v1.Decision message, parts and all."""
    return Decision(
        allowed=m.allowed,
        limit=m.limit,
        remaining=m.remaining,
        reset_at=m.reset_at,
        retry_after_ms=m.retry_after_ms,
        denied_by=-1 if m.allowed else m.denied_by,
        parts=tuple(_decision(p) for p in m.parts),
        fail_open=m.fail_open,
        override=m.override,
        plan=m.plan,
    )


def _error(err: grpc.RpcError) -> SluiceError:
    """The sluice error of a failed call, by its status code."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or str(err)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return invalid_from(details)
    if code == grpc.StatusCode.NOT_FOUND:
        return PolicyNotFoundError(details)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return OperationNotSupportedError(details)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return UnauthenticatedError(f"{code.name}: {details}")
    if code in _UNAVAILABLE:
        return ServiceUnavailableError(f"{code.name}: {details}")
    return SluiceError(f"{code.name}: {details}")


class ServiceBackend:
    """A client of sluice serve's gRPC port, such as ServiceBackend("127.0.0.1:8081").

    target is a gRPC target (host:port); token, when set, is sent as "authorization: Bearer
    TOKEN" (sluice serve --auth-token-file); timeout bounds each call, in seconds; fail_mode is
    "open" or "closed" (see the module's doc). credentials, when given (grpc.ssl_channel_credentials),
    make the channel TLS. One channel serves every call until close(); the backend is safe to use
    from several threads, and is a context manager.

    now, on every call that takes it, is the instant (epoch ms) to decide at, for a server run with
    --allow-client-time; None is the server's clock.
    """

    def __init__(
        self,
        target: str,
        *,
        token: Optional[str] = None,
        timeout: float = 1.0,
        fail_mode: str = "closed",
        credentials: Optional[grpc.ChannelCredentials] = None,
    ) -> None:
        self._fail_mode = check_fail_mode(fail_mode)
        self._timeout = timeout
        self._metadata: Tuple[Tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        if credentials is not None:
            self._channel = grpc.secure_channel(target, credentials)
        else:
            self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.RateLimiterStub(self._channel)

    @property
    def fail_mode(self) -> str:
        """"open" or "closed": what a check answers when the service cannot."""
        return self._fail_mode

    def _call(self, method: Callable[..., T], request: Any) -> T:
        """method(request) with the deadline and token, its failure mapped to a sluice error."""
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise _error(err) from err

    def _decide(self, method: Callable[..., T], request: Any, on_fail_open: Callable[[], T]) -> T:
        """_call for a check: when the service cannot answer, the fail mode decides."""
        try:
            return self._call(method, request)
        except ServiceUnavailableError:
            if self._fail_mode == "open":
                return on_fail_open()
            raise

    def check(self, policy: str, key: str, cost: int = 1, *, now: Optional[int] = None) -> Decision:
        """Consume cost for key under policy, from all of the policy's limits or none."""
        req = pb.CheckRequest(policy=check_policy(policy), key=check_key(key), cost=check_cost(cost), now=check_now(now))
        return self._decide(lambda r, **kw: _decision(self._stub.Check(r, **kw)), req, fail_open_decision)

    def check_many(self, policy: str, keys: Sequence[str], cost: int = 1, *, now: Optional[int] = None) -> List[Decision]:
        """Check each key independently under policy, all at one instant: one decision per key."""
        ks = check_keys(keys)
        req = pb.CheckManyRequest(policy=check_policy(policy), keys=ks, cost=check_cost(cost), now=check_now(now))
        return self._decide(
            lambda r, **kw: [_decision(d) for d in self._stub.CheckMany(r, **kw).decisions],
            req,
            lambda: [fail_open_decision() for _ in ks],
        )

    def check_all(self, items: Sequence[Item], *, now: Optional[int] = None) -> Decision:
        """Check every item together, all or nothing: parts holds one decision per item, denied_by
        the index of the item that denied."""
        its = check_items(items)
        req = pb.CheckAllRequest(items=[pb.Item(policy=i.policy, key=i.key, cost=i.cost) for i in its], now=check_now(now))

        def fail_open() -> Decision:
            return Decision(allowed=True, fail_open=True, parts=tuple(fail_open_decision() for _ in its))

        return self._decide(lambda r, **kw: _decision(self._stub.CheckAll(r, **kw)), req, fail_open)

    def peek(self, policy: str, key: str, *, now: Optional[int] = None) -> Decision:
        """key's state under policy, consuming nothing: allowed says whether a check of cost 1 would
        pass now, remaining what is left now."""
        req = pb.PeekRequest(policy=check_policy(policy), key=check_key(key), now=check_now(now))
        return _decision(self._call(self._stub.Peek, req))

    def forecast(self, policy: str, key: str, cost: int = 1, *, now: Optional[int] = None) -> Forecast:
        """A projection of key's capacity for checks of cost, consuming nothing."""
        req = pb.ForecastRequest(policy=check_policy(policy), key=check_key(key), cost=check_cost(cost), now=check_now(now))
        f = self._call(self._stub.Forecast, req)
        return Forecast(spendable_now=f.spendable_now, next_replenish_at=f.next_replenish_at, full_at=f.full_at)

    def refund(self, policy: str, key: str, cost: int = 1, *, now: Optional[int] = None) -> None:
        """Give cost units back to key, to the limits that count cost, never past a ceiling."""
        req = pb.RefundRequest(policy=check_policy(policy), key=check_key(key), cost=check_cost(cost), now=check_now(now))
        self._call(self._stub.Refund, req)

    def reset(self, policy: str, key: str) -> None:
        """Forget key under policy: its next check starts from a full budget."""
        self._call(self._stub.Reset, pb.ResetRequest(policy=check_policy(policy), key=check_key(key)))

    def close(self) -> None:
        """Close the channel; the backend is unusable afterwards."""
        self._channel.close()

    def __enter__(self) -> "ServiceBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
