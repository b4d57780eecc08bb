"""Build this repository's sluice and run `sluice serve` for tests: a helper any test may reuse.

    binary = build_sluice(tmp)                       # go build ./cmd/sluice, once per session
    with start_serve(binary, {"policies": {...}}, tmp, tokens=["admin:t"]) as srv:
        HttpBackend(srv.http_url, token="t"); ServiceBackend(srv.grpc_target, token="t")

The service listens on free loopback ports, takes requests' own instants (--allow-client-time),
and is stopped (SIGTERM, then killed) when the block ends.
"""

from __future__ import annotations

import json
import pathlib
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Mapping, Optional, Sequence

# The repository's root: clients/python/tests/serve.py is three levels below it.
REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


def build_sluice(out_dir: pathlib.Path) -> pathlib.Path:
    """go build -o out_dir/sluice ./cmd/sluice from this repository; the binary's path."""
    binary = pathlib.Path(out_dir) / "sluice"
    subprocess.run(["go", "build", "-o", str(binary), "./cmd/sluice"], cwd=REPO_ROOT, check=True)
    return binary


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (now)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def policy_name(case_name: str) -> str:
    """A valid policy name (letters, digits and -_.:/, at most 128 bytes) derived from case_name."""
    return re.sub(r"[^A-Za-z0-9_.:/-]", "-", case_name)[:128]


@dataclass
class Serve:
    """A running sluice serve: its addresses, its process, and the log it writes."""

    process: subprocess.Popen[bytes]
    http_url: str
    grpc_target: str
    log_path: pathlib.Path
    tokens: List[str] = field(default_factory=list)

    def log(self) -> str:
        """What the service logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then a kill after 10 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "Serve":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_serve(
    binary: pathlib.Path,
    config: Mapping[str, Any],
    work_dir: pathlib.Path,
    *,
    tokens: Optional[Sequence[str]] = None,
    args: Sequence[str] = (),
    ready_timeout: float = 30.0,
    ready_path: str = "/readyz",
) -> Serve:
    """Start binary serve with config (a mapping, written as JSON, which is YAML), on free
    ports, with --allow-client-time; tokens (lines such as "admin:T" or "check:T") go to a token
    file. Returns once ready_path (/readyz; /healthz for a store meant to be down) answers 200;
    raises (with the log) if it never does."""
    work_dir = pathlib.Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    cfg = work_dir / "sluice.yaml"
    cfg.write_text(json.dumps(config, indent=1))
    http_port, grpc_port = free_port(), free_port()
    cmd = [
        str(binary), "serve", "--config", str(cfg), "--allow-client-time",
        "--http", f"127.0.0.1:{http_port}", "--grpc", f"127.0.0.1:{grpc_port}",
    ]
    if tokens:
        tf = work_dir / "tokens"
        tf.write_text("\n".join(tokens) + "\n")
        cmd += ["--auth-token-file", str(tf)]
    cmd += list(args)
    log_path = work_dir / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work_dir)
    srv = Serve(proc, f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", log_path, list(tokens or ()))
    _wait_ready(srv, ready_timeout, ready_path)
    return srv


def _wait_ready(srv: Serve, timeout: float, path: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.process.poll() is not None:
            raise RuntimeError(f"sluice serve exited {srv.process.returncode}:\n{srv.log()}")
        try:
            with urllib.request.urlopen(srv.http_url + path, timeout=1) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    srv.stop()
    raise RuntimeError(f"sluice serve was not ready within {timeout} s:\n{srv.log()}")


def iter_vector_cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """(file name, case) of every case of conformance/testdata/vectors/*.json, in order."""
    for path in sorted((REPO_ROOT / "conformance" / "testdata" / "vectors").glob("*.json")):
        for case in json.loads(path.read_text())["cases"]:
            yield path.name, case


def vector_policy(case: Mapping[str, Any]) -> dict[str, Any]:
    """The config entry of a vector case's strategy: the vectors' parameter names are the config's."""
    s = dict(case["strategy"])
    out: dict[str, Any] = {"strategy": s.pop("kind")}
    out.update(s)
    return out

