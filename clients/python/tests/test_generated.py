"""The committed gRPC stubs are what generate.sh writes from proto/sluice/v1/sluice.proto now."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = HERE.parent
APT = "apt-get install -y python3-grpc-tools"


def test_generated_stubs_are_up_to_date(tmp_path: pathlib.Path) -> None:
    python = os.environ.get("PYTHON", "/usr/bin/python3")
    probe = subprocess.run([python, "-c", "import grpc_tools.protoc"], capture_output=True)
    if probe.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"grpc_tools is missing; CI must install it ({APT})")
        pytest.skip(f"grpc_tools is missing, so the stubs are not checked; install it with {APT}")
    subprocess.run(["sh", str(PACKAGE / "generate.sh"), str(tmp_path)], check=True, env=dict(os.environ, PYTHON=python))
    for name in ("sluice_pb2.py", "sluice_pb2_grpc.py"):
        committed = (PACKAGE / "sluice" / "_pb" / name).read_bytes()
        fresh = (tmp_path / name).read_bytes()
        assert committed == fresh, f"sluice/_pb/{name} is stale: run clients/python/generate.sh and commit the result"


def test_stubs_import_relative_to_the_package() -> None:
    text = (PACKAGE / "sluice" / "_pb" / "sluice_pb2_grpc.py").read_text()
    assert "from . import sluice_pb2 as sluice__pb2" in text
    assert "\nimport sluice_pb2" not in text


def test_import_needs_no_grpc() -> None:
    # A fresh interpreter: importing sluice and using the HTTP door loads no grpc.
    code = "import sys, sluice; sluice.HttpBackend('http://127.0.0.1:1'); sluice.WSGIMiddleware; print('grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
