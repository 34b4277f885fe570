"""Real servers for the tests: redis-server with the dlock module, on free loopback ports.

REDIS_SERVER names the server binary (default `redis-server` on PATH), DLOCK_MODULE the module
(default target/release/libdlock.so of this repository), as for the Rust tests. Every server
is stopped by its PID, also when a test fails.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest
import redis

import dlock_client as dl

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
                    pytest.fail(f"{MODULE} missing: run `cargo build --release -p dlock`")
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


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def new_server() -> Iterator[Callable[..., Server]]:
    """Servers of one test's own (to kill, or without the module)."""
    started: List[Server] = []

    def start(module: bool = True) -> Server:
        srv = Server(module)
        started.append(srv)
        return srv

    try:
        yield start
    finally:
        for srv in started:
            srv.stop()


@pytest.fixture
def key() -> str:
    return f"test:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(server: Server) -> Iterator[dl.Client]:
    c = dl.Client.from_url(server.url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def bind_supported(server: Server) -> bool:
    """Whether this module has BIND, LOCKDELAY and deadlock detection (one feature set)."""
    with server.redis() as r:
        try:
            r.execute_command("DLOCK.ACQUIRE", "probe:bind", "probe", 1000, "BIND", 10)
        except redis.ResponseError:
            return False
        r.execute_command("DLOCK.RELEASE", "probe:bind", "probe")
        return True


def wait_until(check: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.005)


def holders(c: dl.Client, key: str) -> List[str]:
    return [h.owner for h in c.info(key).holders]


def waiting(c: dl.Client, key: str) -> List[str]:
    return [w.owner for w in c.waiters(key)]
