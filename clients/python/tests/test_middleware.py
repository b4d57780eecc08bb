"""The WSGI and ASGI middleware against the session's sluice serve, each answer compared with the
one Go's middleware.Limit writes for the same decision at the same instant (a small Go program
built from this repository runs it)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import serve as serve_mod
from conftest import ADMIN_TOKEN, make_backend
from sluice import ASGIMiddleware, Decision, ServiceUnavailableError, WSGIMiddleware

NOW = 1_800_000_000_000  # the start of a 1-hour window: the policy "two" resets at NOW + 1 h
CLOCK = NOW + 1_234  # the instant the middleware counts t from
FIELDS = ("ratelimit-policy", "ratelimit", "retry-after", "sluice-fail-mode", "content-type", "x-content-type-options")

GO_PROGRAM = r'''
package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/middleware"
)

type fixed struct {
	d       sluice.Decision
	failing bool
}

func (f fixed) Check(context.Context, string, string, int64) (sluice.Decision, error) {
	if f.failing {
		return sluice.Decision{}, sluice.ErrUnavailable
	}
	return f.d, nil
}

type request struct {
	Policy      string          `json:"policy"`
	WindowMs    int64           `json:"windowMs"`
	NowMs       int64           `json:"nowMs"`
	Unavailable bool            `json:"unavailable"`
	Decision    sluice.Decision `json:"decision"`
}

type answer struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

func main() {
	var in []request
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	out := make([]answer, len(in))
	for i, r := range in {
		next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
		h := middleware.Limit(next, middleware.Options{
			Checker: fixed{r.Decision, r.Unavailable},
			Policy:  r.Policy,
			Window:  time.Duration(r.WindowMs) * time.Millisecond,
			Key:     func(*http.Request) (string, error) { return "k", nil },
		})
		req := httptest.NewRequest("GET", "/", nil).WithContext(sluice.WithNow(context.Background(), r.NowMs))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		a := answer{Status: rec.Code, Headers: map[string]string{}, Body: rec.Body.String()}
		for name, vs := range rec.Header() {
			a.Headers[strings.ToLower(name)] = strings.Join(vs, ", ")
		}
		out[i] = a
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
'''


@pytest.fixture(scope="module")
def go_middleware(sluice_binary: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[List[Dict[str, Any]]], List[Dict[str, Any]]]:
    """A function running Go's middleware.Limit over requests (policy, windowMs, nowMs, decision)."""
    d = tmp_path_factory.mktemp("gomw")
    root = serve_mod.REPO_ROOT
    (d / "go.mod").write_text(
        f"module sluicepymw\n\ngo 1.26.0\n\nrequire github.com/sluicehq/sluice v0.0.0\n\nreplace github.com/sluicehq/sluice => {root}\n"
    )
    shutil.copy(root / "go.sum", d / "go.sum")
    (d / "main.go").write_text(GO_PROGRAM)
    # sluice_binary's build filled the module cache: nothing is fetched.
    env = dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off", GOWORK="off")
    subprocess.run(["go", "build", "-o", str(d / "gomw"), "."], cwd=d, env=env, check=True)

    def run(requests: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        out = subprocess.run([str(d / "gomw")], input=json.dumps(requests).encode(), capture_output=True, check=True)
        return list(json.loads(out.stdout))

    return run


def wire(d: Decision) -> Dict[str, Any]:
    """d as Go's sluice.Decision reads it from JSON."""
    return {"allowed": d.allowed, "limit": d.limit, "remaining": d.remaining, "resetAt": d.reset_at,
            "retryAfterMs": d.retry_after_ms, "deniedBy": d.denied_by, "failOpen": d.fail_open}


class Pinned:
    """A backend checking at NOW, keeping every decision: the duck type the middleware needs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.decisions: List[Decision] = []
        self.keys: List[str] = []

    def check(self, policy: str, key: str, cost: int = 1) -> Decision:
        d: Decision = self.inner.check(policy, key, cost, now=NOW)
        self.decisions.append(d)
        self.keys.append(key)
        return d


class Fixed:
    """A backend answering one decision, or raising one error."""

    def __init__(self, d: Optional[Decision] = None, err: Optional[Exception] = None) -> None:
        self.d, self.err = d, err
        self.calls = 0
        self.keys: List[str] = []

    def check(self, policy: str, key: str, cost: int = 1) -> Decision:
        self.calls += 1
        self.keys.append(key)
        if self.err is not None:
            raise self.err
        assert self.d is not None
        return self.d


Answer = Tuple[int, Dict[str, str], bytes]


def wsgi_app(environ: Any, start_response: Any) -> List[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def call_wsgi(app: Any, headers: Optional[Dict[str, str]] = None, remote: str = "10.0.0.1") -> Answer:
    environ: Dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": remote}
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    got: Dict[str, Any] = {}

    def start_response(status: str, hs: List[Tuple[str, str]], exc_info: Any = None) -> None:
        got["status"] = int(status.split()[0])
        got["headers"] = {n.lower(): v for n, v in hs}

    body = b"".join(app(environ, start_response))
    return got["status"], got["headers"], body


async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def call_asgi(app: Any, headers: Optional[Dict[str, str]] = None, remote: str = "10.0.0.1") -> Answer:
    scope = {"type": "http", "method": "GET", "path": "/", "client": (remote, 5000),
             "headers": [(n.lower().encode(), v.encode()) for n, v in (headers or {}).items()]}
    sent: List[Dict[str, Any]] = []

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    hs = {bytes(n).decode().lower(): bytes(v).decode() for n, v in start["headers"]}
    return start["status"], hs, b"".join(m.get("body", b"") for m in sent[1:])


KINDS = {"wsgi": (WSGIMiddleware, wsgi_app, call_wsgi), "asgi": (ASGIMiddleware, asgi_app, call_asgi)}


@pytest.fixture(params=["grpc", "http"])
def door(request: pytest.FixtureRequest, service: serve_mod.Serve) -> Iterator[Any]:
    target = service.grpc_target if request.param == "grpc" else service.http_url.removeprefix("http://")
    with make_backend(request.param, target, token=ADMIN_TOKEN, timeout=5, fail_mode="closed") as b:
        yield b


def selected(headers: Dict[str, str], app: bool = False) -> Dict[str, str]:
    """The fields the middleware may write; app leaves out Content-Type, the app's own then."""
    return {n: v for n, v in headers.items() if n in FIELDS and not (app and n == "content-type")}


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
@pytest.mark.parametrize("window", [0, 3600, 1.5])
def test_third_request_is_denied_as_go_denies_it(kind: str, window: float, door: Any, go_middleware: Any) -> None:
    cls, app, call = KINDS[kind]
    backend = Pinned(door)
    mw = cls(app, backend, "two", key="X-Api-Key", window=window, clock=lambda: CLOCK)
    key = uuid.uuid4().hex
    answers = [call(mw, {"X-Api-Key": key}) for _ in range(3)]
    assert [a[0] for a in answers] == [200, 200, 429]
    assert backend.keys == [key] * 3
    assert [d.allowed for d in backend.decisions] == [True, True, False]
    assert answers[0][2] == b"ok" and answers[0][1]["content-type"] == "text/plain"
    # The denial: RateLimit fields, Retry-After (seconds, rounded up) and a problem+json body.
    status, headers, body = answers[2]
    assert headers["retry-after"] == "3600"  # 3 600 000 ms: the window, asked at its start
    assert headers["ratelimit"] == '"two";r=0;t=3599'  # reset NOW + 1 h, counted from CLOCK
    w = {0: "", 3600: ";w=3600", 1.5: ";w=2"}[window]
    assert headers["ratelimit-policy"] == f'"two";q=2{w}'
    assert json.loads(body)["retryAfterMs"] == 3_600_000
    want = go_middleware([{"policy": "two", "windowMs": int(window * 1000), "nowMs": CLOCK, "decision": wire(d)} for d in backend.decisions])
    for (status, headers, body), (d, go) in zip(answers, zip(backend.decisions, want)):
        assert status == go["status"], d
        assert selected(headers, d.allowed) == selected(go["headers"], d.allowed), d
        assert body == go["body"].encode(), d


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_fail_open_sets_the_mode_and_no_fields(kind: str, go_middleware: Any) -> None:
    cls, app, call = KINDS[kind]
    d = Decision(allowed=True, fail_open=True)
    status, headers, body = call(cls(app, Fixed(d), "two"))
    assert (status, body) == (200, b"ok")
    assert headers["sluice-fail-mode"] == "open"
    assert "ratelimit" not in headers and "ratelimit-policy" not in headers
    go = go_middleware([{"policy": "two", "nowMs": CLOCK, "decision": wire(d)}])[0]
    assert selected(go["headers"], app=True) == selected(headers, app=True)


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_unavailable_is_503_closed(kind: str, go_middleware: Any) -> None:
    cls, app, call = KINDS[kind]
    status, headers, body = call(cls(app, Fixed(err=ServiceUnavailableError("down")), "two"))
    go = go_middleware([{"policy": "two", "nowMs": CLOCK, "unavailable": True, "decision": wire(Decision(allowed=False))}])[0]
    assert status == go["status"] == 503
    assert selected(headers) == selected(go["headers"])
    assert body == go["body"].encode()


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_keys(kind: str) -> None:
    cls, app, call = KINDS[kind]
    allowed = Decision(allowed=True, limit=5, remaining=4, reset_at=CLOCK + 1000)
    backend = Fixed(allowed)
    call(cls(app, backend, "p"), remote="192.0.2.7")
    call(cls(app, backend, "p", key="X-User"), {"X-User": "alice"})
    call(cls(app, backend, "p", key=lambda req: "fn"))
    assert backend.keys == ["192.0.2.7", "alice", "fn"]
    # No key: a 400, and nothing checked.
    no_key: List[Tuple[Any, Dict[str, str]]] = [
        (cls(app, backend, "p", key="X-User"), {}),
        (cls(app, backend, "p", key="X-User"), {"X-User": "k" * 1025}),
        (cls(app, backend, "p", key=lambda req: None), {}),
    ]
    for mw, headers in no_key:
        status, hs, body = call(mw, headers)
        assert status == 400 and hs["content-type"] == "application/problem+json"
    assert len(backend.keys) == 3


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_allowed_fields_leave_the_apps_own(kind: str) -> None:
    cls, _, call = KINDS[kind]

    def wapp(environ: Any, start_response: Any) -> List[bytes]:
        start_response("200 OK", [("RateLimit", "mine")])
        return [b"ok"]

    async def aapp(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"ratelimit", b"mine")]})
        await send({"type": "http.response.body", "body": b"ok"})

    d = Decision(allowed=True, limit=5, remaining=4, reset_at=CLOCK + 1500)
    status, headers, _ = call(cls(wapp if kind == "wsgi" else aapp, Fixed(d), "p", clock=lambda: CLOCK))
    assert headers["ratelimit"] == "mine"
    assert headers["ratelimit-policy"] == '"p";q=5'
    assert "retry-after" not in headers


def test_asgi_awaits_an_async_backend() -> None:
    class Async:
        async def check(self, policy: str, key: str, cost: int = 1) -> Decision:
            return Decision(allowed=False, limit=1, remaining=0, reset_at=CLOCK + 500, retry_after_ms=500, denied_by=0)

    status, headers, _ = call_asgi(ASGIMiddleware(asgi_app, Async(), "p", clock=lambda: CLOCK))
    assert (status, headers["retry-after"], headers["ratelimit"]) == (429, "1", '"p";r=0;t=1')


def test_asgi_passes_other_scopes() -> None:
    seen: List[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    backend = Fixed(Decision(allowed=False))
    asyncio.run(ASGIMiddleware(app, backend, "p")({"type": "lifespan"}, None, None))  # type: ignore[arg-type]
    assert seen == ["lifespan"] and backend.calls == 0


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_a_redis_backend_is_asked_for_its_own_policy(kind: str) -> None:
    """A RedisBackend holds one policy: the middleware asks it check(key, cost)."""
    redis = pytest.importorskip("redis")
    from sluice import FixedWindow, RedisBackend

    url = os.environ.get("SLUICE_REDIS_URL", "redis://127.0.0.1:6379")
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Redis at {url} under CI: {err}")
        pytest.skip(f"no Redis at {url}")
    prefix = f"sluice-pytest-{uuid.uuid4().hex}"
    try:
        backend = RedisBackend(client, "two", FixedWindow(limit=2, window_ms=3_600_000), prefix=prefix)
        cls, app, call = KINDS[kind]
        mw = cls(app, backend, "two", key="X-Api-Key")
        assert [call(mw, {"X-Api-Key": "k"})[0] for _ in range(3)] == [200, 200, 429]
    finally:
        keys = list(client.scan_iter(match=prefix + ":*"))
        if keys:
            client.delete(*keys)
        client.close()
