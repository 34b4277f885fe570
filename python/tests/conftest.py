"""Fixtures: real servers (servers.py), each stopped by its PID also when a test fails."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

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
    started: list[Server] = []

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
    with dl.Client.from_url(server.url) as c:
        yield c


class Features:
    """What the server's module has beyond the base commands (BIND, LOCKDELAY, DEADLOCK)."""

    def __init__(self, r: redis.Redis) -> None:
        self.bind = self._accepts(r, "BIND", 10)
        self.lock_delay = self._accepts(r, "LOCKDELAY", 10)
        self.deadlock = "dlock_deadlocks" in r.info("dlock")

    @staticmethod
    def _accepts(r: redis.Redis, option: str, value: int) -> bool:
        try:
            r.execute_command("DLOCK.ACQUIRE", "probe:features", "probe", 1000, option, value)
        except redis.ResponseError:
            return False
        r.execute_command("DLOCK.RELEASE", "probe:features", "probe")
        return True


@pytest.fixture(scope="session")
def features(server: Server) -> Features:
    with server.redis() as r:
        return Features(r)
