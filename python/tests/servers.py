"""redis-server processes with (or without) the dlock module, on free loopback ports.

REDIS_SERVER names the server binary (default `redis-server` on PATH), DLOCK_MODULE the module
(default target/release/libdlock.so of this repository), as for the Rust tests. Used by the
tests (conftest.py) and by bench/bench.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[2]
MODULE = os.environ.get("DLOCK_MODULE", str(REPO / "target" / "release" / "libdlock.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One redis-server process; `module=False` starts one without dlock."""

    def __init__(self, module: bool = True) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="dlock-py-")
        for attempt in range(5):
            self.port = free_port()
            args = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", self.dir.name]
            if module:
                if not Path(MODULE).exists():
                    raise RuntimeError(f"{MODULE} missing: run `cargo build --release -p dlock`")
                args += ["--loadmodule", MODULE]
            log = open(Path(self.dir.name) / "log", "w")
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_ready():
                return
            self.stop()  # the port was taken meanwhile: another one
        raise RuntimeError(f"redis-server did not start: {self.log()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as r:
                    r.ping()
                    return True
            except redis.ConnectionError:
                time.sleep(0.02)
        return False

    def log(self) -> str:
        return (Path(self.dir.name) / "log").read_text()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def redis(self) -> "redis.Redis":
        return redis.Redis(port=self.port, decode_responses=True)

    def kill(self) -> None:
        """kill -9: the server is gone at once, sockets reset."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.kill()
        self.dir.cleanup()
