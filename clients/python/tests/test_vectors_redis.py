"""Every conformance vector (conformance/testdata/vectors/*.json) replayed through RedisBackend.

Each case runs on the real Redis (127.0.0.1:6379, or SLUICE_REDIS_URL) under a prefix of its own, so
it starts from empty state as the vectors require, and every field of every step's decision must
equal the vector's. Without a Redis the tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sluice.redis import RedisBackend  # noqa: E402
from sluice.strategies import from_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
VECTORS = sorted((REPO / "conformance" / "testdata" / "vectors").glob("*.json"))


def _cases() -> List[Tuple[str, Dict[str, Any]]]:
    """Every case of every vector file, named file/case."""
    out = []
    for path in VECTORS:
        doc = json.loads(path.read_text())
        assert doc["format"] == "sluice-vectors/1", path
        for case in doc["cases"]:
            out.append((f"{path.stem}/{case['name']}", case))
    return out


CASES = _cases()


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A redis.Redis on SLUICE_REDIS_URL; skips without one (fails under CI=true)."""
    redis = pytest.importorskip("redis")
    url = os.environ.get("SLUICE_REDIS_URL", "redis://127.0.0.1:6379")
    c = redis.Redis.from_url(url)
    try:
        c.ping()
    except redis.RedisError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Redis at {url} under CI: {err}")
        pytest.skip(f"no Redis at {url}: {err}")
    yield c
    c.close()


def test_every_vector_file_is_replayed() -> None:
    """The vectors exist, and both files with every kind of strategy are among the cases."""
    assert {p.name for p in VECTORS} >= {"reference.json", "throttlekit-golden.json"}
    kinds = {case["strategy"]["kind"] for _, case in CASES}
    assert kinds == {"gcra", "tokenBucket", "fixedWindow", "slidingWindow", "slidingWindowLog"}
    assert sum(len(case["steps"]) for _, case in CASES) >= 1454


@pytest.mark.parametrize("name,case", CASES, ids=[name for name, _ in CASES])
def test_vector(client: Any, name: str, case: Dict[str, Any]) -> None:
    prefix = f"sluice-pytest-{uuid.uuid4().hex}"
    backend = RedisBackend(client, "vectors", from_spec(case["strategy"]), prefix=prefix)
    keys = set()
    try:
        for i, step in enumerate(case["steps"]):
            keys.add(backend.redis_key(step["key"]))
            d = backend.check(step["key"], step["cost"], now=step["now"])
            got = {
                "allowed": d.allowed,
                "limit": d.limit,
                "remaining": d.remaining,
                "resetAt": d.reset_at,
                "retryAfterMs": d.retry_after_ms,
            }
            assert got == step["expect"], f"{name} step {i}: {step}"
            assert d.denied_by == (-1 if d.allowed else 0) and not d.fail_open
    finally:
        if keys:
            client.delete(*keys)
