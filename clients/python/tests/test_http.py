"""HttpBackend's own concerns: kept-alive connections, base URLs, and the mapping of answers a
memory-store serve never gives (503, 500, 501, a server's fail-open decision), from a fake."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

import serve as serve_mod
from conftest import ADMIN_TOKEN
from sluice import (
    Decision,
    HttpBackend,
    InvalidArgumentError,
    Item,
    OperationNotSupportedError,
    PolicyNotFoundError,
    ServiceUnavailableError,
    SluiceError,
)

# key -> (status, body) the fake answers /v1/check with; a body of bytes is sent as it is.
ANSWERS: Dict[str, Tuple[int, Any]] = {
    "open": (200, {"allowed": True, "limit": 0, "remaining": 0, "resetAt": 0, "retryAfterMs": 0, "failOpen": True}),
    "closed": (503, {"error": "httpapi: store unavailable", "code": "unavailable", "failMode": "closed"}),
    "proxy": (502, b"<html>Bad Gateway</html>"),
    "internal": (500, {"error": "httpapi: internal error", "code": "internal"}),
    "unimpl": (501, {"error": "sluice: operation not supported", "code": "unimplemented"}),
    "missing": (404, {"error": "sluice: unknown policy \"x\"", "code": "not_found"}),
    "bad": (400, {"error": "httpapi: keys: 1001 keys, at most 1000 per request", "code": "invalid_argument"}),
    "odd": (400, {"error": "something else", "code": "invalid_argument"}),
    "teapot": (418, {"error": "no", "code": "teapot"}),
}


class Fake(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    requests: List[Tuple[str, Dict[str, Any], Dict[str, str]]] = []
    connections: Set[Tuple[str, int]] = set()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Fake.requests.append((self.path, body, dict(self.headers)))
        Fake.connections.add(self.client_address)
        if self.path.endswith("/v1/check-all"):
            status, answer = 200, {"allowed": False, "deniedBy": 1, "decisions": [
                {"allowed": True, "limit": 9, "remaining": 4, "resetAt": 5, "retryAfterMs": 0},
                {"allowed": False, "limit": 2, "remaining": 0, "resetAt": 8, "retryAfterMs": 70}]}
        else:
            k = body.get("key") or (body.get("keys") or [""])[0]
            status, answer = ANSWERS.get(k, (200, {"allowed": True, "limit": 3, "remaining": 2, "resetAt": 1, "retryAfterMs": 0}))
        if self.path.endswith("/v1/check-many") and status == 200:
            answer = {"decisions": [answer for _ in body["keys"]]}
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_servers_fail_open_decision_passes_through(fake: str, mode: str) -> None:
    with HttpBackend(fake, fail_mode=mode) as b:
        assert b.check("p", "open") == Decision(allowed=True, fail_open=True)


@pytest.mark.parametrize("key", ["closed", "proxy", "internal"])
def test_unavailable_answers_follow_the_fail_mode(fake: str, key: str) -> None:
    with HttpBackend(fake, fail_mode="open") as b:
        assert b.check("p", key) == Decision(allowed=True, fail_open=True)
        assert b.check_many("p", [key]) == [Decision(allowed=True, fail_open=True)]
        with pytest.raises(ServiceUnavailableError):
            b.peek("p", key)
        with pytest.raises(ServiceUnavailableError):
            b.refund("p", key)
    with HttpBackend(fake, fail_mode="closed") as b:
        with pytest.raises(ServiceUnavailableError):
            b.check("p", key)


def test_error_codes(fake: str) -> None:
    with HttpBackend(fake) as b:
        with pytest.raises(OperationNotSupportedError):
            b.check("p", "unimpl")
        with pytest.raises(PolicyNotFoundError):
            b.check("p", "missing")
        with pytest.raises(InvalidArgumentError) as info:
            b.check("p", "bad")
        assert (info.value.field, info.value.reason) == ("keys", "1001 keys, at most 1000 per request")
        with pytest.raises(InvalidArgumentError) as info:
            b.check("p", "odd")
        assert info.value.field == "request"
        with pytest.raises(SluiceError):
            b.check("p", "teapot")


def test_check_all_folds_the_items(fake: str) -> None:
    with HttpBackend(fake) as b:
        d = b.check_all([Item("p", "a"), Item("q", "b")])
    assert (d.allowed, d.denied_by, d.limit, d.remaining, d.reset_at, d.retry_after_ms) == (False, 1, 2, 0, 8, 70)
    assert [p.denied_by for p in d.parts] == [-1, 0]


def test_bodies_token_and_prefix(fake: str) -> None:
    Fake.requests.clear()
    with HttpBackend(fake + "/base/", token="T") as b:
        b.check("p", "k", 2, now=5)
        b.check("p", "k")
        b.peek("p", "k")
        b.reset("p", "k")
        b.check_many("p", ["a"], now=7)
    paths = [r[0] for r in Fake.requests]
    assert paths == ["/base/v1/check", "/base/v1/check", "/base/v1/peek", "/base/v1/reset", "/base/v1/check-many"]
    bodies = [r[1] for r in Fake.requests]
    assert bodies == [
        {"policy": "p", "key": "k", "cost": 2, "now": 5},
        {"policy": "p", "key": "k", "cost": 1},
        {"policy": "p", "key": "k"},
        {"policy": "p", "key": "k"},
        {"policy": "p", "keys": ["a"], "cost": 1, "now": 7},
    ]
    assert all(r[2]["Authorization"] == "Bearer T" and r[2]["Content-Type"] == "application/json" for r in Fake.requests)


def test_one_kept_alive_connection(fake: str) -> None:
    Fake.connections.clear()
    with HttpBackend(fake) as b:
        for _ in range(5):
            b.check("p", "k")
    assert len(Fake.connections) == 1


def test_threads_share_the_backend(service: serve_mod.Serve) -> None:
    errors: List[BaseException] = []
    with HttpBackend(service.http_url, token=ADMIN_TOKEN, timeout=5) as b:
        def work() -> None:
            try:
                for _ in range(20):
                    assert b.check("gcra", "threads", now=1).limit == 5
            except BaseException as err:  # noqa: BLE001
                errors.append(err)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://h", "http://", "http://h/?q=1", "http://h/#f"])
def test_base_url_is_checked(url: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        HttpBackend(url)
    assert info.value.field == "base_url"
