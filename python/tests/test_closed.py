"""Closed is closed (docs/CLIENTS.md): after ``close()`` / ``aclose()`` every call raises
``ClientClosedError``; close ends the watchdog, every connection (the server's CLIENT LIST is
back to what it was) and every wait in flight, on either backend; a program ends by itself."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

import dlock_client as dl
from helpers import answer, in_thread, wait_until
from servers import Server


def connections(r: redis.Redis) -> int:
    """The server's clients, less the one asking."""
    return len(r.client_list()) - 1


def every_call_raises_closed(c: dl.Client, held: dl.Held, key: str) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: c.lock(key), lambda: c.rwlock(key), lambda: c.semaphore(key, 2),
        held.release, held.renew, lambda: c.info(key), lambda: c.waiters(key),
        c.native_backend,
    ]
    for call in calls:
        with pytest.raises(dl.ClientClosedError):
            call()


@pytest.mark.parametrize("module", [True, False], ids=["native", "script"])
def test_close_ends_waits_connections_and_holds(new_server: Any, key: str,
                                                module: bool) -> None:
    srv: Server = new_server(module)
    with srv.redis() as r, dl.Client.from_url(srv.url) as other:
        taken = other.lock(key).acquire()
        before = connections(r)
        c = dl.Client.from_url(srv.url)
        lock = c.lock(key)
        held = c.lock(key + ":mine", lease=2.0).acquire()
        permits = c.semaphore(key + ":s", 3).acquire(count=2)
        waits = [in_thread(lambda: answer(lock.acquire)) for _ in range(3)]  # 3 owners
        if module:
            wait_until(lambda: len(other.waiters(key)) == 3)
        else:
            wait_until(lambda: r.pubsub_numsub(f"redisson_lock__channel:{{{key}}}")[0][1] == 3)
        assert connections(r) > before
        lock_for_later = c.lock(key)
        c.close()
        for t, _ in waits:
            t.join(2)
            assert not t.is_alive()
        assert all(isinstance(out[0], dl.ClientClosedError) for _, out in waits), waits
        wait_until(lambda: connections(r) == before, timeout=3, what="CLIENT LIST as before")
        assert held.lost.is_set() and held.lost.reason == "closed"
        assert permits.lost.reason == "closed"
        every_call_raises_closed(c, held, key)
        with pytest.raises(dl.ClientClosedError):
            lock_for_later.acquire(timeout=1)
        c.close()  # again: nothing
        if module:
            assert other.waiters(key) == []
        assert taken.release() is True


def test_a_wait_in_flight_raises_closed(server: Server, client: dl.Client, key: str) -> None:
    client.lock(key).acquire()
    c = dl.Client.from_url(server.url)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            c.lock(key).acquire(timeout=30)
        except BaseException as error:  # noqa: BLE001 - the answer under test
            errors.append(error)

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: client.waiters(key))
    c.close()
    t.join(2)
    assert len(errors) == 1 and isinstance(errors[0], dl.ClientClosedError), errors
    assert isinstance(errors[0], dl.DlockError)
    wait_until(lambda: not client.waiters(key), what="nothing left queued")


PROGRAM = """
import sys, threading, dlock_client as dl
c = dl.Client.from_url(sys.argv[1], backend=sys.argv[3])
c.lock(sys.argv[2]).acquire()  # the main thread holds it: the others wait
def wait():
    try:
        c.lock(sys.argv[2]).acquire()
    except dl.ClientClosedError:
        print("closed", flush=True)
waiters = [threading.Thread(target=wait) for _ in range(3)]  # not daemons
for t in waiters:
    t.start()
while len(threading.enumerate()) < 5:
    pass
import time; time.sleep(0.3)
c.close()
"""


@pytest.mark.parametrize("backend", ["native", "script"])
def test_a_program_ends_by_itself_after_close(new_server: Any, key: str, backend: str) -> None:
    srv: Server = new_server(backend == "native")
    proc = subprocess.run([sys.executable, "-c", PROGRAM, srv.url, key, backend],
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("closed") == 3, proc.stdout


async def test_asyncio_closed_is_closed(server: Server, key: str) -> None:
    with server.redis() as r:
        before = connections(r)
        other = dl.asyncio.Client.from_url(server.url)
        c = dl.asyncio.Client.from_url(server.url)
        taken = await other.lock(key).acquire()
        held = await c.lock(key + ":mine").acquire()
        waits = [asyncio.create_task(c.lock(key).acquire()) for _ in range(2)]
        while len(await other.waiters(key)) < 2:
            await asyncio.sleep(0.01)
        await c.aclose()
        for wait in waits:
            with pytest.raises(dl.ClientClosedError):
                await wait
        assert held.lost.reason == "closed"
        assert c._dog is None or c._dog.done(), "the watchdog stopped"
        for call in (lambda: c.lock(key), lambda: c.semaphore(key, 1)):
            with pytest.raises(dl.ClientClosedError):
                call()
        for coro in (held.release, held.renew, lambda: c.info(key), c.native_backend):
            with pytest.raises(dl.ClientClosedError):
                await coro()
        await c.aclose()
        assert await other.waiters(key) == []
        await taken.release()
        await other.aclose()
        wait_until(lambda: connections(r) == before, timeout=3, what="CLIENT LIST as before")
