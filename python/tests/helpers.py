"""Test helpers shared by the test modules (servers.py starts the servers)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import dlock_client as dl
from servers import Server

T = TypeVar("T")


def wait_until(check: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.005)


async def async_wait_until(check: Callable[[], Any], timeout: float = 10.0,
                           what: str = "") -> None:
    """`check` is a coroutine function."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.005)


def holders(c: dl.Client, key: str) -> list[str]:
    return [h.owner for h in c.info(key).holders]


def waiting(c: dl.Client, key: str) -> list[str]:
    return [w.owner for w in c.waiters(key)]


def answer(fn: Callable[[], Any]) -> Any:
    """What `fn` returned, or the exception it raised (the answer a test looks at)."""
    try:
        return fn()
    except BaseException as error:  # noqa: BLE001 - the answer under test
        return error


def in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    """Runs `fn` on a thread of its own (another owner); its result lands in the list."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    return t, out


HOLDER = """
import sys, time, dlock_client as dl
c = dl.Client.from_url(sys.argv[1], bind=float(sys.argv[4]))
held = c.lock(sys.argv[2], lease=float(sys.argv[3])).acquire()
print(held.owner, flush=True)
time.sleep(60)
"""


def start_holder(server: Server, key: str, lease: float,
                 bind: float) -> tuple[subprocess.Popen[str], str]:
    """A process that takes the lock and holds it: (the process, its owner id)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, server.url, key, str(lease), str(bind)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def kill_holder_while_waiting(client: dl.Client, key: str, proc: subprocess.Popen[str],
                               timeout: float, alive: Callable[[], None] = lambda: None,
                               ) -> tuple[Any, float, float]:
    """Runs `alive()` (checks while the holder `proc` lives), then an acquire of `key` on a
    thread; once it waits, kills the holder. Answers (the acquire's result, when the holder
    was killed, when the acquire answered). The holder is killed and reaped even on failure."""
    try:
        alive()
        t, out = in_thread(lambda: (client.lock(key).acquire(timeout=timeout), time.monotonic()))
        wait_until(lambda: len(client.waiters(key)) == 1)
        proc.kill()
        killed_at = time.monotonic()
        t.join(timeout)
    finally:
        proc.kill()
        proc.wait()
    held, granted_at = out[0]
    return held, killed_at, granted_at


def other_task(make: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
    """Runs `make()` in a task of its own, so as another owner (the owner of an asyncio
    ``acquire()`` is the task that calls it)."""
    async def run() -> T:
        return await make()
    return asyncio.create_task(run())
