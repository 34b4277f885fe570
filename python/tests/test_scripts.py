"""The script backend (Redisson's layout and Lua scripts) on a server without the module."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

import dlock_client as dl
from helpers import in_thread, other_task
from servers import Server


@pytest.fixture
def plain(new_server: Any) -> Server:
    srv: Server = new_server(module=False)
    return srv


@pytest.fixture
def sclient(plain: Server) -> Iterator[dl.Client]:
    with dl.Client.from_url(plain.url) as c:
        yield c


def test_auto_falls_back_and_native_insists(plain: Server, sclient: dl.Client, key: str) -> None:
    assert sclient.native_backend() is False
    with dl.Client.from_url(plain.url, backend="native") as c:
        with pytest.raises(dl.ModuleNotLoadedError, match="not loaded"):
            c.lock(key).acquire()
    with pytest.raises(dl.ConfigError, match="backend"):
        dl.Client.from_url(plain.url, backend="lua")


def test_redisson_layout_and_reentrancy(plain: Server, sclient: dl.Client, key: str) -> None:
    lock = sclient.lock(key, lease=5.0)
    a = lock.acquire()
    b = lock.acquire(timeout=0)
    assert a is not None and b is not None and (a.count, b.count) == (1, 2)
    with plain.redis() as r:
        assert r.hgetall(key) == {a.owner: "2"}, "Redisson's hash: owner -> hold count"
        assert 0 < r.pttl(key) <= 5000
    t, out = in_thread(lambda: lock.acquire(timeout=0))
    t.join()
    assert out == [None], "another thread is another owner"
    assert b.release() is False and a.release() is True
    with plain.redis() as r:
        assert r.exists(key) == 0


def test_waiter_wakes_on_the_unlock_message_not_the_lease(sclient: dl.Client, key: str) -> None:
    first = sclient.lock(key, lease=20.0).acquire()
    assert first is not None
    t, out = in_thread(lambda: (sclient.lock(key).acquire(timeout=10), time.monotonic()))
    time.sleep(0.3)
    released_at = time.monotonic()
    assert first.release()
    t.join(10)
    second, granted_at = out[0]
    assert second is not None and granted_at - released_at < 1.0, "woken by the release"
    assert second.release()


def test_wait_times_out_with_one_deadline(sclient: dl.Client, key: str) -> None:
    first = sclient.lock(key, lease=20.0).acquire()
    assert first is not None
    t, out = in_thread(lambda: (time.monotonic(), sclient.lock(key).acquire(timeout=0.5),
                                time.monotonic()))
    t.join(5)
    start, got, end = out[0]
    assert got is None and 0.45 <= end - start < 2.0
    first.release()


def test_watchdog_renews_and_lost_on_delete(plain: Server, sclient: dl.Client, key: str) -> None:
    held = sclient.lock(key, lease=0.6).acquire()
    assert held is not None
    time.sleep(2.0)  # three leases
    assert not held.lost.is_set()
    with plain.redis() as r:
        assert r.hget(key, held.owner) == "1"
        r.delete(key)
    assert held.lost.wait(3) and held.lost.reason == "not_held"


def test_rwlock_and_semaphore(sclient: dl.Client, key: str) -> None:
    rw = sclient.rwlock(key + ":rw", lease=5.0)
    r1 = rw.read().acquire()
    t, out = in_thread(lambda: rw.read().acquire(timeout=0))
    t.join()
    tw, wout = in_thread(lambda: rw.write().acquire(timeout=0))
    tw.join()
    assert r1 is not None and out[0] is not None, "readers share"
    assert wout == [None], "a writer waits for the readers"
    out[0].release()
    r1.release()
    sem = sclient.semaphore(key + ":s", 3, lease=5.0)
    two = sem.acquire(count=2)
    assert two is not None and two.count == 2
    t, out = in_thread(lambda: sem.acquire(timeout=0, count=2))
    t.join()
    assert out == [None]
    with pytest.raises(dl.CommandError, match="capacity is 3"):
        sclient.semaphore(key + ":s", 5).acquire(timeout=0)
    assert two.release() is True


def test_what_needs_the_module(sclient: dl.Client, key: str) -> None:
    with pytest.raises(dl.NotSupportedError, match="script backend"):
        sclient.lock(key, fence=True).acquire()
    with pytest.raises(dl.NotSupportedError):
        sclient.lock(key, lock_delay=1.0).acquire()
    with pytest.raises(dl.NotSupportedError):
        sclient.waiters(key)


async def test_asyncio_script_backend(plain: Server, key: str) -> None:
    async with dl.asyncio.Client.from_url(plain.url, backend="script") as c:
        first = await c.lock(key, lease=0.6).acquire()
        assert first is not None
        waiter = other_task(lambda: c.lock(key).acquire(timeout=10))
        await asyncio.sleep(1.5)
        assert not first.lost.is_set() and not waiter.done()
        assert await first.release() is True
        second = await asyncio.wait_for(waiter, 2)
        assert second is not None and await second.release() is True
