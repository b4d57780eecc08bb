"""Both doors against the session's sluice serve: round trips, bad input, tokens, fail modes; and
the gRPC door's mapping of statuses against a fake RateLimiter of its own."""

from __future__ import annotations

import time
import uuid
from concurrent import futures
from typing import Any, Callable, Iterator, List

import grpc
import pytest

import serve as serve_mod
from conftest import ADMIN_TOKEN, CHECK_TOKEN, make_backend
from sluice import (
    Decision,
    Forecast,
    InvalidArgumentError,
    Item,
    OperationNotSupportedError,
    PolicyNotFoundError,
    ServiceBackend,
    ServiceUnavailableError,
    SluiceError,
    UnauthenticatedError,
)
from sluice._pb import sluice_pb2 as pb
from sluice._pb import sluice_pb2_grpc as pb_grpc

NOW = 1_800_000_000_000  # an instant (epoch ms) the tests pin, on a 1-hour window's start


def key() -> str:
    """A key no other test uses."""
    return uuid.uuid4().hex


def target(door: str, service: serve_mod.Serve) -> str:
    return service.grpc_target if door == "grpc" else service.http_url.removeprefix("http://")


def test_check_and_peek(backend: Any) -> None:
    k = key()
    d = backend.check("two", k, now=NOW)
    assert d == Decision(allowed=True, limit=2, remaining=1, reset_at=NOW + 3_600_000, retry_after_ms=0, denied_by=-1)
    assert backend.peek("two", k, now=NOW) == Decision(allowed=True, limit=2, remaining=1, reset_at=NOW + 3_600_000, denied_by=-1)
    assert backend.check("two", k, now=NOW).remaining == 0
    d = backend.check("two", k, now=NOW + 1000)
    assert (d.allowed, d.remaining, d.retry_after_ms, d.denied_by) == (False, 0, 3_599_000, 0)
    assert d.retry_after == 3599.0


def test_check_many(backend: Any) -> None:
    a, b = key(), key()
    backend.check("two", a, now=NOW)
    ds = backend.check_many("two", [a, b], now=NOW)
    assert [(d.allowed, d.remaining) for d in ds] == [(True, 0), (True, 1)]
    ds = backend.check_many("two", [a, b], 2, now=NOW)
    assert [d.allowed for d in ds] == [False, False]


def test_check_all(backend: Any) -> None:
    a, b = key(), key()
    d = backend.check_all([Item("two", a), Item("bucket", b, 4)], now=NOW)
    assert d.allowed and d.denied_by == -1 and len(d.parts) == 2
    assert [(p.limit, p.remaining) for p in d.parts] == [(2, 1), (10, 6)]
    # The binding item is the one with the least remaining, as in Go's Combine.
    assert (d.limit, d.remaining) == (2, 1)
    d = backend.check_all([Item("bucket", b, 4), Item("two", a, 2)], now=NOW)
    assert not d.allowed and d.denied_by == 1
    assert (d.limit, d.remaining, d.retry_after_ms) == (2, 1, 3_600_000)
    # Nothing was consumed: the bucket still holds 6.
    assert backend.peek("bucket", b, now=NOW).remaining == 6


def test_composite_parts(backend: Any) -> None:
    k = key()
    d = backend.check("composite", k, 10, now=NOW)
    assert d.allowed and [(p.limit, p.remaining) for p in d.parts] == [(3, 2), (100, 90)]
    assert d.denied_by == -1


def test_forecast(backend: Any) -> None:
    k = key()
    assert backend.forecast("bucket", k, now=NOW) == Forecast(spendable_now=10, next_replenish_at=NOW, full_at=NOW)
    backend.check("bucket", k, 3, now=NOW)
    f = backend.forecast("bucket", k, 2, now=NOW)
    assert f == Forecast(spendable_now=3, next_replenish_at=NOW + 1000, full_at=NOW + 3000)


def test_refund_and_reset(backend: Any) -> None:
    k = key()
    backend.check("bucket", k, 5, now=NOW)
    backend.refund("bucket", k, 2, now=NOW)
    assert backend.peek("bucket", k, now=NOW).remaining == 7
    backend.reset("bucket", k)
    assert backend.peek("bucket", k, now=NOW).remaining == 10


BAD_INPUT = [
    ("cost 0", lambda b: b.check("two", "k", 0), "cost"),
    ("cost -1", lambda b: b.check("two", "k", -1), "cost"),
    ("cost not int", lambda b: b.check("two", "k", 1.5), "cost"),
    ("empty key", lambda b: b.check("two", ""), "key"),
    ("long key", lambda b: b.check("two", "x" * 1025), "key"),
    ("long key, multibyte", lambda b: b.check("two", "é" * 513), "key"),
    ("many: empty key", lambda b: b.check_many("two", ["a", ""]), "keys[1]"),
    ("many: cost 0", lambda b: b.check_many("two", ["a"], 0), "cost"),
    ("all: no items", lambda b: b.check_all([]), "items"),
    ("all: cost 0", lambda b: b.check_all([Item("two", "a"), Item("two", "b", 0)]), "items[1].cost"),
    ("all: long key", lambda b: b.check_all([Item("two", "k" * 2000)]), "items[0].key"),
    ("peek: empty key", lambda b: b.peek("two", ""), "key"),
    ("forecast: cost 0", lambda b: b.forecast("two", "k", 0), "cost"),
    ("refund: cost 0", lambda b: b.refund("two", "k", 0), "cost"),
    ("reset: long key", lambda b: b.reset("two", "k" * 1025), "key"),
]


@pytest.mark.parametrize("door", ["grpc", "http"])
@pytest.mark.parametrize("name,call,field", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_refused_locally(door: str, name: str, call: Any, field: str) -> None:
    # A closed port: had anything been sent, the error would be ServiceUnavailableError.
    with make_backend(door, f"127.0.0.1:{closed_port()}", fail_mode="closed", timeout=0.5) as b:
        with pytest.raises(InvalidArgumentError) as info:
            call(b)
    assert info.value.field == field


def test_key_of_1024_bytes_is_accepted(backend: Any) -> None:
    assert backend.check("two", "k" * 1024, now=NOW).allowed


def test_server_side_invalid_argument_names_the_field(backend: Any) -> None:
    # A cost above what the policy can ever admit is the server's to refuse.
    with pytest.raises(InvalidArgumentError) as info:
        backend.check("two", key(), 3, now=NOW)
    assert info.value.field == "cost"
    assert "exceeds" in info.value.reason


def test_unknown_policy(backend: Any) -> None:
    with pytest.raises(PolicyNotFoundError):
        backend.check("no-such-policy", "k")
    with pytest.raises(PolicyNotFoundError):
        backend.peek("no-such-policy", "k")


@pytest.mark.parametrize("door", ["grpc", "http"])
@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_bad_token(door: str, token: Any, service: serve_mod.Serve) -> None:
    with make_backend(door, target(door, service), token=token, fail_mode="open") as b:
        with pytest.raises(UnauthenticatedError):
            b.check("two", key())


@pytest.mark.parametrize("door", ["grpc", "http"])
def test_check_token_lacks_the_admin_scope(door: str, service: serve_mod.Serve) -> None:
    with make_backend(door, target(door, service), token=CHECK_TOKEN) as b:
        assert b.check("two", key(), now=NOW).allowed
        with pytest.raises(UnauthenticatedError):
            b.reset("two", key())


def closed_port() -> int:
    """A loopback port nothing listens on."""
    return serve_mod.free_port()


@pytest.mark.parametrize("door", ["grpc", "http"])
def test_fail_open_when_unreachable(door: str) -> None:
    with make_backend(door, f"127.0.0.1:{closed_port()}", fail_mode="open", timeout=0.5) as b:
        assert b.check("two", "k") == Decision(allowed=True, fail_open=True)
        assert b.check_many("two", ["a", "b"]) == [Decision(allowed=True, fail_open=True)] * 2
        d = b.check_all([Item("two", "a"), Item("two", "b")])
        assert d.allowed and d.fail_open and d.parts == (Decision(allowed=True, fail_open=True),) * 2
        # Peek, forecast, refund and reset admit nothing: they never fail open.
        calls: List[Callable[[], object]] = [
            lambda: b.peek("two", "k"), lambda: b.forecast("two", "k"), lambda: b.refund("two", "k"), lambda: b.reset("two", "k"),
        ]
        for call in calls:
            with pytest.raises(ServiceUnavailableError):
                call()


@pytest.mark.parametrize("door", ["grpc", "http"])
def test_fail_closed_when_unreachable(door: str) -> None:
    with make_backend(door, f"127.0.0.1:{closed_port()}", fail_mode="closed", timeout=0.5) as b:
        calls: List[Callable[[], object]] = [
            lambda: b.check("two", "k"), lambda: b.check_many("two", ["a"]), lambda: b.check_all([Item("two", "a")]),
        ]
        for call in calls:
            with pytest.raises(ServiceUnavailableError):
                call()


@pytest.mark.parametrize("door", ["grpc", "http"])
def test_fail_mode_is_checked(door: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        make_backend(door, "127.0.0.1:1", fail_mode="sometimes")
    assert info.value.field == "fail_mode"


def test_errors_are_sluice_errors() -> None:
    for cls in (InvalidArgumentError, PolicyNotFoundError, OperationNotSupportedError, ServiceUnavailableError, UnauthenticatedError):
        assert issubclass(cls, SluiceError)


def test_channel_is_reused(service: serve_mod.Serve) -> None:
    with ServiceBackend(service.grpc_target, token=ADMIN_TOKEN) as b:
        channel = b._channel
        for _ in range(3):
            b.check("gcra", key())
        assert b._channel is channel


# A fake RateLimiter, for the statuses and fields a memory-store serve never answers.


class FakeLimiter(pb_grpc.RateLimiterServicer):  # type: ignore[misc]
    """Answers by key: "open" a server's fail-open decision, "down" UNAVAILABLE, "unimpl"
    UNIMPLEMENTED, "slow" after 2 s; anything else a denial with parts."""

    def Check(self, request: Any, context: Any) -> Any:
        if request.key == "open":
            context.send_initial_metadata((("sluice-fail-mode", "open"),))
            return pb.Decision(allowed=True, fail_open=True)
        if request.key == "down":
            context.abort(grpc.StatusCode.UNAVAILABLE, "store unavailable")
        if request.key == "unimpl":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "sluice: operation not supported")
        if request.key == "slow":
            time.sleep(2)
        return pb.Decision(allowed=False, limit=5, remaining=0, reset_at=9, retry_after_ms=7, denied_by=1, plan="pro", override=True,
                           parts=[pb.Decision(allowed=True, limit=9, remaining=3, denied_by=-1), pb.Decision(allowed=False, limit=5)])

    def Peek(self, request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNAVAILABLE, "store unavailable")


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_RateLimiterServicer_to_server(FakeLimiter(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_fake_servers_fail_open_decision_passes_through(fake: str, mode: str) -> None:
    with ServiceBackend(fake, fail_mode=mode) as b:
        assert b.check("p", "open") == Decision(allowed=True, fail_open=True)


def test_fake_unavailable_follows_the_fail_mode(fake: str) -> None:
    with ServiceBackend(fake, fail_mode="open") as b:
        assert b.check("p", "down") == Decision(allowed=True, fail_open=True)
        with pytest.raises(ServiceUnavailableError):
            b.peek("p", "k")
    with ServiceBackend(fake, fail_mode="closed") as b:
        with pytest.raises(ServiceUnavailableError):
            b.check("p", "down")


def test_fake_deadline_follows_the_fail_mode(fake: str) -> None:
    with ServiceBackend(fake, fail_mode="open", timeout=0.2) as b:
        assert b.check("p", "slow") == Decision(allowed=True, fail_open=True)
    with ServiceBackend(fake, fail_mode="closed", timeout=0.2) as b:
        with pytest.raises(ServiceUnavailableError):
            b.check("p", "slow")


def test_fake_unimplemented(fake: str) -> None:
    with ServiceBackend(fake) as b:
        with pytest.raises(OperationNotSupportedError):
            b.check("p", "unimpl")


def test_fake_every_field(fake: str) -> None:
    with ServiceBackend(fake) as b:
        d = b.check("p", "k")
    assert d == Decision(
        allowed=False, limit=5, remaining=0, reset_at=9, retry_after_ms=7, denied_by=1, plan="pro", override=True,
        parts=(Decision(allowed=True, limit=9, remaining=3), Decision(allowed=False, limit=5, denied_by=0)),
    )


# A real serve whose store is down: its own fail modes, through both doors.


@pytest.fixture(scope="module")
def store_down(sluice_binary: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[serve_mod.Serve]:
    """A sluice serve over a Redis nothing listens on: "lenient" fails open, "strict" closed."""
    config = {
        "store": f"redis://127.0.0.1:{closed_port()}",
        "storeTimeout": "100ms",
        "policies": {
            "lenient": {"strategy": "gcra", "limit": 10, "periodMs": 1000, "burst": 5, "failMode": "open"},
            "strict": {"strategy": "gcra", "limit": 10, "periodMs": 1000, "burst": 5, "failMode": "closed"},
        },
    }
    srv = serve_mod.start_serve(sluice_binary, config, tmp_path_factory.mktemp("down"), ready_path="/healthz")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("door", ["grpc", "http"])
@pytest.mark.parametrize("mode", ["open", "closed"])
def test_servers_own_fail_open_passes_through(door: str, mode: str, store_down: serve_mod.Serve) -> None:
    with make_backend(door, target(door, store_down), fail_mode=mode, timeout=5) as b:
        assert b.check("lenient", "k") == Decision(allowed=True, fail_open=True)
        assert b.check_many("lenient", ["a", "b"]) == [Decision(allowed=True, fail_open=True)] * 2
        d = b.check_all([Item("lenient", "a"), Item("lenient", "b")])
        assert d.allowed and d.fail_open


@pytest.mark.parametrize("door", ["grpc", "http"])
def test_servers_fail_closed_meets_the_clients_mode(door: str, store_down: serve_mod.Serve) -> None:
    with make_backend(door, target(door, store_down), fail_mode="closed", timeout=5) as b:
        with pytest.raises(ServiceUnavailableError):
            b.check("strict", "k")
        with pytest.raises(ServiceUnavailableError):
            b.peek("lenient", "k")  # a peek has no fail mode
    with make_backend(door, target(door, store_down), fail_mode="open", timeout=5) as b:
        assert b.check("strict", "k") == Decision(allowed=True, fail_open=True)
