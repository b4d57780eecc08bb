"""Every step of every conformance vector case, replayed through both doors of one sluice serve.

Each case has a policy of its own (conftest.session_config) and each door prefixes its keys, so
that every case starts from empty state on each door; every field of every step must match.
"""

from __future__ import annotations

from typing import Any, List

import pytest

import serve as serve_mod
from conftest import ADMIN_TOKEN, make_backend

FIELDS = (("allowed", "allowed"), ("limit", "limit"), ("remaining", "remaining"), ("resetAt", "reset_at"), ("retryAfterMs", "retry_after_ms"))


def _total_steps() -> int:
    return sum(len(case["steps"]) for _, case in serve_mod.iter_vector_cases())


def test_vectors_have_the_expected_size() -> None:
    assert _total_steps() == 1454


@pytest.mark.parametrize("door", ["grpc", "http"])
def test_vectors(door: str, service: serve_mod.Serve) -> None:
    target = service.grpc_target if door == "grpc" else service.http_url.removeprefix("http://")
    mismatches: List[str] = []
    steps = 0
    with make_backend(door, target, token=ADMIN_TOKEN, timeout=5, fail_mode="closed") as b:
        for file_name, case in serve_mod.iter_vector_cases():
            policy = serve_mod.policy_name(case["name"])
            for i, step in enumerate(case["steps"]):
                d = b.check(policy, f"{door}/{step['key']}", step["cost"], now=step["now"])
                steps += 1
                assert not d.fail_open, f"{case['name']} step {i}: a fail-open answer"
                for wire, attr in FIELDS:
                    want: Any = step["expect"][wire]
                    got = getattr(d, attr)
                    if got != want:
                        mismatches.append(f"{file_name} {case['name']} step {i} {wire}: want {want!r}, got {got!r}")
    assert steps == 1454
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:50])
