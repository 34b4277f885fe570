"""Redis Cluster: a 3-master cluster of real servers (servers.Cluster), the client built on
redis-py's RedisCluster (sync) and redis.asyncio's (asyncio). Keys on every master; a slot
moved (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE on all) under a waiter, which
the new owner grants within its one deadline, and under a held lock, whose renewals follow."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis.asyncio.cluster
from redis.crc import key_slot

import dlock_client as dl
from helpers import wait_until
from servers import Cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(3)
    try:
        yield c
    finally:
        c.stop()


def key_on(cluster: Cluster, node: int) -> str:
    """A fresh key whose slot node `node` serves now."""
    while True:
        key = f"test:{uuid.uuid4().hex[:12]}"
        if cluster.key_owner(key) == node:
            return key


@pytest.fixture
def client(cluster: Cluster) -> Iterator[dl.Client]:
    with dl.Client(cluster.cluster()) as c:
        yield c


@pytest.fixture
def other(cluster: Cluster) -> Iterator[dl.Client]:
    """A second client (another process's view)."""
    with dl.Client(cluster.cluster()) as c:
        yield c


class Waiting(threading.Thread):
    """acquire(timeout) in a thread: the hold (or None), how long it took, or its error."""

    def __init__(self, acquirable: dl.Acquirable, timeout: float | None) -> None:
        super().__init__(daemon=True)
        self.acquirable, self.timeout = acquirable, timeout
        self.held: dl.Held | None = None
        self.error: BaseException | None = None
        self.took = -1.0
        self.owner: str | None = None
        self.start()

    def run(self) -> None:
        self.owner = self.acquirable._client.owner()
        start = time.monotonic()
        try:
            self.held = self.acquirable.acquire(timeout=self.timeout)
        except BaseException as e:
            self.error = e
        self.took = time.monotonic() - start

    def result(self, within: float) -> dl.Held | None:
        self.join(within)
        assert not self.is_alive(), "the acquire did not return"
        if self.error is not None:
            raise self.error
        return self.held


def queued(c: dl.Client, key: str) -> list[str]:
    return [w.owner for w in c.waiters(key)]


def test_locks_on_every_master(cluster: Cluster, client: dl.Client, other: dl.Client) -> None:
    for node in range(3):
        key = key_on(cluster, node)
        held = client.lock(key, fence=True).acquire(timeout=0)
        assert held is not None and held.token == 1
        assert cluster.holder(key) == node  # on the master of its slot
        assert [h.owner for h in other.info(key).holders] == [held.owner]
        # A waiter on that master, granted when the holder releases.
        w = Waiting(other.lock(key, fence=True), timeout=10)
        wait_until(lambda k=key, w=w: queued(client, k) == [w.owner], what="the waiter queued")
        assert held.release() is True
        second = w.result(5)
        assert second is not None and second.token == 2
        assert w.took < 5
        assert second.release() is True
        assert other.info(key).holders == ()


def test_a_blocked_wait_does_not_stall_other_commands(
        cluster: Cluster, client: dl.Client, other: dl.Client) -> None:
    key = key_on(cluster, 0)
    neighbour = key_on(cluster, 0)  # same master
    held = client.lock(key).acquire()
    assert held is not None
    w = Waiting(other.lock(key), timeout=None)  # waits without limit
    wait_until(lambda: len(queued(client, key)) == 1, what="the waiter queued")
    start = time.monotonic()
    for _ in range(20):
        h = other.lock(neighbour).acquire(timeout=1)
        assert h is not None and h.release()
    assert time.monotonic() - start < 2.0
    assert w.is_alive()
    held.release()
    second = w.result(5)
    assert second is not None
    second.release()


def test_a_wait_outlasts_the_response_timeout(cluster: Cluster, client: dl.Client) -> None:
    """Waits have no read time-out: a 0.3 s command time-out does not cut a 1 s wait."""
    key = key_on(cluster, 2)
    held = client.lock(key).acquire()
    assert held is not None
    with dl.Client(cluster.cluster(), response_timeout=0.3) as c:
        w = Waiting(c.lock(key), timeout=5)
        wait_until(lambda: len(queued(client, key)) == 1, what="the waiter queued")
        time.sleep(1.0)
        assert held.release() is True
        second = w.result(5)
        assert second is not None and 1.0 <= w.took < 5
        second.release()


def moved_errors(cluster: Cluster, node: int) -> int:
    with cluster.nodes[node].redis() as r:
        stats = r.info("errorstats")
    return int(stats.get("errorstat_MOVED", {}).get("count", 0))


def test_a_wait_sent_on_a_stale_slot_map_follows_moved(cluster: Cluster, client: dl.Client,
                                                        other: dl.Client) -> None:
    """The waiter's slot map says the old owner: MOVED, the map read again, the wait queued
    at the new owner and granted there."""
    key = key_on(cluster, 0)
    assert other.native_backend()  # its slot map read before the slot moves
    held = client.lock(key).acquire()
    assert held is not None
    src = cluster.key_owner(key)
    dst = move_slot_of(cluster, key)
    before = moved_errors(cluster, src)
    w = Waiting(other.lock(key), timeout=5)
    wait_until(lambda: len(queued(client, key)) == 1, what="the waiter queued at the new owner")
    assert moved_errors(cluster, src) > before  # it went to the old owner first
    assert held.release() is True
    second = w.result(5)
    assert second is not None and cluster.holder(key) == dst
    second.release()


def test_rwlock_and_semaphore_on_a_cluster(cluster: Cluster, client: dl.Client,
                                           other: dl.Client) -> None:
    rw, sem = key_on(cluster, 1), key_on(cluster, 2)
    r1 = client.rwlock(rw).read().acquire(timeout=0)
    r2 = client.rwlock(rw).read().acquire(timeout=0)  # reentrant
    assert r1 is not None and r2 is not None
    assert other.rwlock(rw).write().acquire(timeout=0.2) is None
    permits = client.semaphore(sem, 3).acquire(timeout=0, count=2)
    assert permits is not None and permits.count == 2
    assert other.semaphore(sem, 3).acquire(timeout=0.2, count=2) is None
    for h in (r1, r2, permits):
        h.release()
    assert other.info(rw).holders == () and other.info(sem).holders == ()


def move_slot_of(cluster: Cluster, key: str) -> int:
    """Moves the slot of `key` (and every key in it) to the next master; its new owner."""
    src = cluster.key_owner(key)
    dst = (src + 1) % 3
    cluster.move_slot(key_slot(key.encode()), src, dst)
    return dst


def test_a_waiter_follows_its_slot_to_the_new_owner(
        cluster: Cluster, client: dl.Client, other: dl.Client) -> None:
    key = key_on(cluster, 0)
    held = client.lock(key, lease=1.0, fence=True).acquire()
    assert held is not None
    w = Waiting(other.lock(key, fence=True), timeout=8)
    wait_until(lambda: len(queued(client, key)) == 1, what="the waiter queued")
    dst = move_slot_of(cluster, key)
    assert cluster.holder(key) == dst
    # The waiter queues again at the new owner (the hold moved with its key); the holder's
    # renewals follow the slot too.
    wait_until(lambda: queued(client, key) == [w.owner], what="queued at the new owner")
    time.sleep(3 * 1.0)  # three leases of the holder on the new owner
    assert not held.lost.is_set()
    assert [h.owner for h in other.info(key).holders] == [held.owner]
    assert w.is_alive()
    assert held.release() is True
    second = w.result(5)
    assert second is not None and held.token is not None and second.token is not None
    assert second.token > held.token  # the fencing counter moved with the slot
    assert w.took < 8
    assert cluster.holder(key) == dst
    assert second.release() is True


def test_a_held_lock_is_renewed_where_its_slot_went(cluster: Cluster, client: dl.Client,
                                                    other: dl.Client) -> None:
    lease = 1.0
    holds = [client.lock(key_on(cluster, 1), lease=lease).acquire(),
             client.rwlock(key_on(cluster, 1), lease=lease).write().acquire(),
             client.semaphore(key_on(cluster, 1), 2, lease=lease).acquire()]
    for h in holds:
        assert h is not None
        move_slot_of(cluster, h.key)
        assert h.renew() is True  # at once: sent to the old owner, redirected to the new
    time.sleep(3 * lease)
    for h in holds:
        assert h is not None and not h.lost.is_set()
        assert [x.owner for x in other.info(h.key).holders] == [h.owner]
        assert h.release() is True


def test_a_wait_running_out_across_a_redirect_returns_none_on_time(
        cluster: Cluster, client: dl.Client, other: dl.Client) -> None:
    key = key_on(cluster, 2)
    held = client.lock(key).acquire()
    assert held is not None
    w = Waiting(other.lock(key), timeout=1.5)
    wait_until(lambda: len(queued(client, key)) == 1, what="the waiter queued")
    move_slot_of(cluster, key)
    assert w.result(5) is None
    assert 1.45 <= w.took < 2.5  # its one deadline, not a fresh 1.5 s at the new owner
    assert queued(client, key) == []  # nothing left queued
    assert held.release() is True


def test_bound_holds_on_every_master_keep_a_sign_of_life(cluster: Cluster,
                                                         other: dl.Client) -> None:
    """BIND per node: each master's holds are bound to the watchdog's connection to that
    master, whose sign of life (a PING well within the grace) keeps them valid between
    renewals (30 s leases: none due in this test)."""
    grace = 0.6
    c = dl.Client(cluster.cluster(), bind=grace)
    try:
        holds = [c.lock(key_on(cluster, node), lease=30.0).acquire(timeout=1)
                 for node in range(3)]
        time.sleep(5 * grace)
        for h in holds:
            assert h is not None and not h.lost.is_set(), h
    finally:
        c.close()  # its connections closed, as when its process dies
    # Bound on every master: freed a grace after the close, not a lease.
    start = time.monotonic()
    wait_until(lambda: all(h is not None and not other.info(h.key).holders for h in holds),
               what="the holds freed after the grace")
    assert time.monotonic() - start < 5


def test_script_backend_on_a_cluster(cluster: Cluster) -> None:
    """backend="script" (Redisson's scripts, as on a cluster without the module): tries and
    renewals are scripts routed by key; a waiter listens on the unlock channel on its key's
    node and is woken by the release."""
    from dlock_client import _scripts

    key = key_on(cluster, 1)
    with dl.Client(cluster.cluster(), backend="script") as a, \
            dl.Client(cluster.cluster(), backend="script") as b:
        held = a.lock(key, lease=1.0).acquire(timeout=0)
        assert held is not None and a.native_backend() is False
        w = Waiting(b.lock(key), timeout=10)
        with cluster.nodes[1].redis() as r:
            wait_until(lambda: r.pubsub_numsub(_scripts.channel(key))[0][1] == 1,
                       what="the waiter subscribed on the key's node")
        time.sleep(3 * 1.0)  # three leases, renewed by script
        assert not held.lost.is_set() and w.is_alive()
        assert held.release() is True
        second = w.result(5)
        assert second is not None and second.release() is True


def test_a_dead_master_loses_only_its_own_holds() -> None:
    """A master killed (its own cluster: this one ends broken): holds on the other masters
    stay renewed, the dead master's hold is lost when its lease runs out."""
    lease = 0.8
    cluster = Cluster(3)
    try:
        with dl.Client(cluster.cluster()) as c:
            holds = [c.lock(key_on(cluster, node), lease=lease).acquire(timeout=1)
                     for node in range(3)]
            cluster.nodes[2].kill()
            time.sleep(3 * lease)  # well within the cluster's node time-out (5 s)
            alive, dead = holds[:2], holds[2]
            assert all(h is not None and not h.lost.is_set() for h in alive)
            assert dead is not None and dead.lost.is_set()
            assert all(h is not None and h.release() for h in alive)
    finally:
        cluster.stop()


def test_errors_name_the_cluster(cluster: Cluster, client: dl.Client) -> None:
    key = key_on(cluster, 0)
    with cluster.nodes[0].redis() as r:
        r.set(key, "not a lock")
    with pytest.raises(dl.WrongTypeError):
        client.lock(key).acquire(timeout=1)
    with pytest.raises(dl.WrongTypeError):
        client.lock(key).acquire(timeout=0)


# -- asyncio ---------------------------------------------------------------------------


Clients = tuple[dl.asyncio.Client, dl.asyncio.Client]


@pytest.fixture
async def aclients(cluster: Cluster) -> AsyncIterator[Clients]:
    """Two asyncio clients, each on a redis.asyncio RedisCluster (not initialized yet)."""
    a, b = (dl.asyncio.Client(redis.asyncio.cluster.RedisCluster(host="127.0.0.1",
                                                                 port=cluster.port))
            for _ in range(2))
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


async def waiting_count(c: dl.asyncio.Client, key: str, n: int) -> None:
    async def check() -> bool:
        return len(await c.waiters(key)) == n
    await await_until(check, f"{n} waiting")


async def b_queues_behind_a(
        aclients: Clients, cluster: Cluster, node: int, timeout: float | None, *,
        lease: float = 30.0, fence: bool = False,
) -> tuple[str, dl.asyncio.Held, asyncio.Task[dl.asyncio.Held | None], float]:
    """A fresh key on master `node`, held by client a; client b's acquire(timeout) runs in a
    task, queued at the node. Returns the key, a's hold, b's task and when b began to wait."""
    a, b = aclients
    key = key_on(cluster, node)
    held = await a.lock(key, lease=lease, fence=fence).acquire()
    assert held is not None
    start = time.monotonic()
    waiter = asyncio.create_task(b.lock(key, fence=fence).acquire(timeout=timeout))
    await waiting_count(a, key, 1)
    return key, held, waiter, start


async def await_until(check: Callable[[], Any], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


@pytest.mark.asyncio
async def test_asyncio_locks_on_every_master(aclients: Clients, cluster: Cluster) -> None:
    a, b = aclients
    for node in range(3):
        key = key_on(cluster, node)
        held = await a.lock(key, fence=True).acquire(timeout=0)
        assert held is not None and held.token == 1
        assert cluster.holder(key) == node
        waiter = asyncio.create_task(b.lock(key, fence=True).acquire(timeout=10))
        await waiting_count(a, key, 1)
        assert await held.release() is True
        second = await asyncio.wait_for(waiter, 5)
        assert second is not None and second.token == 2
        await second.release()


@pytest.mark.asyncio
async def test_asyncio_waiter_and_holder_follow_a_moved_slot(
        aclients: Clients, cluster: Cluster) -> None:
    a, _ = aclients
    key, held, waiter, start = await b_queues_behind_a(aclients, cluster, 1, 8, lease=1.0,
                                                       fence=True)
    dst = await asyncio.to_thread(move_slot_of, cluster, key)
    await waiting_count(a, key, 1)  # queued again at the new owner
    await asyncio.sleep(3 * 1.0)
    assert not held.lost.is_set() and not waiter.done()
    assert await held.release() is True
    second = await asyncio.wait_for(waiter, 5)
    assert second is not None and held.token is not None and second.token is not None
    assert second.token > held.token and time.monotonic() - start < 8
    assert cluster.holder(key) == dst
    await second.release()


@pytest.mark.asyncio
async def test_asyncio_wait_running_out_across_a_redirect(
        aclients: Clients, cluster: Cluster) -> None:
    a, _ = aclients
    key, held, waiter, start = await b_queues_behind_a(aclients, cluster, 2, 1.5)
    await asyncio.to_thread(move_slot_of, cluster, key)
    assert await asyncio.wait_for(waiter, 5) is None
    assert 1.45 <= time.monotonic() - start < 2.5
    assert await a.waiters(key) == []
    await held.release()


def test_readme_cluster_example(cluster: Cluster) -> None:
    from test_readme import python_blocks

    block = next(b for b in python_blocks() if "RedisCluster" in b)
    code = block.replace('host="10.0.0.1", port=7000', f'host="127.0.0.1", port={cluster.port}')
    assert code != block
    scope: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), scope)
    client = scope["client"]
    try:
        assert scope["held"].released and client.info("orders:42").holders == ()
    finally:
        client.close()


@pytest.mark.asyncio
async def test_asyncio_cancelled_wait_leaves_nothing_queued(
        aclients: Clients, cluster: Cluster) -> None:
    a, _ = aclients
    key, held, waiter, _ = await b_queues_behind_a(aclients, cluster, 0, None)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await waiting_count(a, key, 0)  # the cancelled waiter gone from the node's queue
    assert await held.release() is True
    assert (await a.info(key)).holders == ()
