"""The asyncio API against a real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

import dlock_client as dl
from helpers import async_wait_until, other_task
from servers import Server

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[dl.asyncio.Client]:
    c = dl.asyncio.Client.from_url(server.url)
    try:
        yield c
    finally:
        await c.aclose()


async def wait_for_waiters(c: dl.asyncio.Client, key: str, n: int) -> None:
    async def check() -> bool:
        return len(await c.waiters(key)) == n
    await async_wait_until(check, what=f"{n} waiters")


async def test_tasks_exclude_each_other_on_a_shared_counter(
        aclient: dl.asyncio.Client, key: str) -> None:
    counter = {"n": 0}

    async def work() -> None:
        for _ in range(20):
            async with aclient.lock(key):
                n = counter["n"]
                await asyncio.sleep(0.0005)  # another task runs here
                counter["n"] = n + 1

    await asyncio.gather(*(work() for _ in range(5)))
    assert counter["n"] == 100


async def test_long_hold_renewed_and_hand_over(aclient: dl.asyncio.Client, key: str) -> None:
    first = await aclient.lock(key, lease=0.6, fence=True).acquire()
    assert first is not None and first.token is not None
    waiter = other_task(lambda: aclient.lock(key, fence=True).acquire())
    await asyncio.sleep(2.0)  # more than three leases
    assert not first.lost.is_set() and not waiter.done()
    assert [h.owner for h in (await aclient.info(key)).holders] == [first.owner]
    assert await first.release() is True
    second = await asyncio.wait_for(waiter, 2)
    assert second is not None and second.token is not None and second.token > first.token
    await second.release()


async def test_cancelled_wait_leaves_no_hold_and_no_waiter(
        aclient: dl.asyncio.Client, key: str) -> None:
    holder = await aclient.lock(key).acquire()
    assert holder is not None
    task = other_task(lambda: aclient.lock(key).acquire())
    await wait_for_waiters(aclient, key, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await aclient.waiters(key) == []
    assert (await aclient.info(key)).waiters == 0
    assert await holder.release() is True
    assert (await aclient.info(key)).kind == "none", "nothing granted to the cancelled waiter"


async def test_wait_for_time_out_leaves_no_hold_and_no_waiter(
        aclient: dl.asyncio.Client, key: str) -> None:
    holder = await aclient.lock(key).acquire()
    assert holder is not None
    with pytest.raises(asyncio.TimeoutError):  # another task waits (its own owner)
        await other_task(lambda: asyncio.wait_for(aclient.lock(key).acquire(), 0.3))
    assert await aclient.waiters(key) == []
    await holder.release()
    assert (await aclient.info(key)).kind == "none"


async def test_cancel_racing_the_grant_leaves_nothing_held(
        aclient: dl.asyncio.Client, key: str) -> None:
    """Cancelled in the same instant as the release that grants it: whichever came first,
    nothing stays held."""
    for _ in range(10):
        holder = await aclient.lock(key).acquire()
        assert holder is not None
        task = other_task(lambda: aclient.lock(key).acquire())
        await wait_for_waiters(aclient, key, 1)
        release = asyncio.create_task(holder.release())
        await asyncio.sleep(0)
        task.cancel()
        await release
        await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            info = await aclient.info(key)
            assert info.kind == "none" and info.waiters == 0, info
        else:
            got = task.result()
            assert got is not None
            await got.release()


async def test_time_out_answers_none(aclient: dl.asyncio.Client, key: str) -> None:
    holder = await aclient.lock(key).acquire()
    assert holder is not None

    async def other() -> tuple[float, object]:
        start = time.monotonic()
        got = await aclient.lock(key).acquire(timeout=0.3)
        return time.monotonic() - start, got

    took, got = await asyncio.create_task(other())
    assert got is None and 0.29 <= took < 2.0
    assert await aclient.waiters(key) == []
    await holder.release()


async def test_reentrancy_per_task(aclient: dl.asyncio.Client, key: str) -> None:
    lock = aclient.lock(key)
    async with lock as outer:
        async with lock as inner:
            assert (outer.count, inner.count) == (1, 2)
        assert await other_task(lambda: lock.acquire(timeout=0)) is None, "another task"
    assert (await aclient.info(key)).kind == "none"


async def test_lost_when_the_key_is_deleted(server: Server, aclient: dl.asyncio.Client,
                                            key: str) -> None:
    held = await aclient.lock(key, lease=0.6).acquire()
    assert held is not None
    with server.redis() as r:
        r.delete(key)
    await asyncio.wait_for(held.lost.wait(), 3)


async def test_lost_when_the_server_dies(new_server: object, key: str) -> None:
    srv = new_server()  # type: ignore[operator]
    c = dl.asyncio.Client.from_url(srv.url)
    try:
        held = await c.lock(key, lease=1.0).acquire()
        assert held is not None
        srv.kill()
        start = time.monotonic()
        await asyncio.wait_for(held.lost.wait(), 5)
        assert time.monotonic() - start < 1.0 + 1.0, "by the end of the lease (+ margin)"
    finally:
        await c.aclose()


async def test_rwlock_and_semaphore(aclient: dl.asyncio.Client, key: str) -> None:
    rw = aclient.rwlock(key + ":rw")
    r1 = await rw.read().acquire()
    r2 = await other_task(lambda: rw.read().acquire(timeout=0))
    assert r1 is not None and r2 is not None
    assert await other_task(lambda: rw.write().acquire(timeout=0)) is None
    await r1.release()
    await r2.release()
    sem = aclient.semaphore(key + ":sem", 2)
    a = await sem.acquire(count=2)
    assert a is not None
    assert await other_task(lambda: sem.acquire(timeout=0.1)) is None
    await a.release()


async def test_errors(new_server: object, key: str) -> None:
    plain = new_server(module=False)  # type: ignore[operator]
    c = dl.asyncio.Client.from_url(plain.url, backend="native")
    with pytest.raises(dl.ModuleNotLoadedError,
                       match=f"^dlock module not loaded on 127.0.0.1:{plain.port}$"):
        await c.lock(key).acquire()
    await c.aclose()


async def test_short_commands_after_the_server_closed_the_connections(server: Server,
                                                                      key: str) -> None:
    """A pooled connection the server closed meanwhile is replaced on checkout (redis-py 8
    skips that check while its maintenance notifications are on: the package turns them off
    for its pools)."""
    async with dl.asyncio.Client.from_url(server.url + "?client_name=killed") as c:
        held = await c.lock(key, lease=5.0).acquire()
        assert held is not None
        with server.redis() as r:
            for conn in r.client_list():
                if conn["name"] == "killed":
                    r.client_kill_filter(_id=conn["id"])
        await asyncio.sleep(0.2)
        assert (await c.info(key)).holders[0].owner == held.owner
        assert await held.release() is True
