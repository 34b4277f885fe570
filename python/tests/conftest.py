"""Fixtures: real servers (servers.py), each stopped by its PID also when a test fails."""

from __future__ import annotations

import time
import uuid
from typing import Callable, Iterator, List, Optional

import pytest
import redis

import dlock_client as dl
from servers import Server


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
