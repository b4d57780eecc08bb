"""The session's sluice serve: built from this repository, one policy per conformance vector case
plus the policies the other tests use, with an admin and a check token."""

from __future__ import annotations

import pathlib
import sys
from typing import Any, Dict, Iterator

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # serve.py, beside this file
sys.path.insert(0, str(HERE.parent))  # the sluice package, uninstalled

import serve as serve_mod  # noqa: E402

ADMIN_TOKEN = "admin-token-for-tests"
CHECK_TOKEN = "check-token-for-tests"

# The policies beside the vectors'.
TEST_POLICIES: Dict[str, Any] = {
    # Two an hour in windows aligned to the epoch: the middleware's third request is denied.
    "two": {"strategy": "fixedWindow", "limit": 2, "windowMs": 3_600_000},
    "bucket": {"strategy": "tokenBucket", "capacity": 10, "refillPerSec": 1},
    "gcra": {"strategy": "gcra", "limit": 10, "periodMs": 1000, "burst": 5},
    "composite": {
        "limits": [
            {"name": "requests", "unit": "request", "strategy": "fixedWindow", "limit": 3, "windowMs": 60_000},
            {"name": "tokens", "strategy": "tokenBucket", "capacity": 100, "refillPerSec": 10},
        ]
    },
}


def session_config() -> Dict[str, Any]:
    """The config of the session's service."""
    policies: Dict[str, Any] = dict(TEST_POLICIES)
    for _, case in serve_mod.iter_vector_cases():
        name = serve_mod.policy_name(case["name"])
        assert name not in policies, f"two cases share policy {name}"
        policies[name] = serve_mod.vector_policy(case)
    return {"store": "memory", "policies": policies}


@pytest.fixture(scope="session")
def sluice_binary(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """This repository's sluice, built once per session."""
    return serve_mod.build_sluice(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def service(sluice_binary: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[serve_mod.Serve]:
    """The session's sluice serve (see the module's doc)."""
    srv = serve_mod.start_serve(
        sluice_binary,
        session_config(),
        tmp_path_factory.mktemp("serve"),
        tokens=[f"admin:{ADMIN_TOKEN}", f"check:{CHECK_TOKEN}"],
    )
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(params=["grpc", "http"])
def backend(request: pytest.FixtureRequest, service: serve_mod.Serve) -> Iterator[Any]:
    """A backend of each door, with the admin token, failing closed."""
    yield from _backend(request.param, service, ADMIN_TOKEN, "closed")


def _backend(door: str, service: serve_mod.Serve, token: str, fail_mode: str) -> Iterator[Any]:
    if door == "grpc":
        from sluice import ServiceBackend

        with ServiceBackend(service.grpc_target, token=token, timeout=5, fail_mode=fail_mode) as b:
            yield b
    else:
        from sluice import HttpBackend

        with HttpBackend(service.http_url, token=token, timeout=5, fail_mode=fail_mode) as b:
            yield b


def make_backend(door: str, target: str, **kw: Any) -> Any:
    """A backend of door ("grpc" or "http") at target (host:port)."""
    if door == "grpc":
        from sluice import ServiceBackend

        return ServiceBackend(target, **kw)
    from sluice import HttpBackend

    return HttpBackend(f"http://{target}", **kw)
