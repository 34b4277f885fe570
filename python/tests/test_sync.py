"""The synchronous API against a real server."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest

import dlock_client as dl
from helpers import holders, in_thread, kill_holder_while_waiting, start_holder, wait_until, waiting
from servers import Server


def test_long_hold_is_renewed_past_many_leases(client: dl.Client, key: str) -> None:
    held = client.lock(key, lease=0.6).acquire()
    assert held is not None
    time.sleep(2.0)  # more than three leases
    assert not held.lost.is_set()
    assert holders(client, key) == [held.owner]
    t, out = in_thread(lambda: client.lock(key).acquire(timeout=0))
    t.join()
    assert out == [None]
    assert held.release() is True
    assert client.info(key).kind == "none"


def test_released_hold_is_never_renewed(client: dl.Client, key: str) -> None:
    held = client.lock(key, lease=0.3).acquire()
    assert held is not None and held.release()
    time.sleep(0.5)
    assert client.info(key).kind == "none"
    assert len(client._registry) == 0


def test_hand_over_right_after_release(client: dl.Client, key: str) -> None:
    lock = client.lock(key, fence=True)
    first = lock.acquire()
    assert first is not None and first.token is not None
    t, out = in_thread(lambda: (lock.acquire(), time.monotonic()))
    wait_until(lambda: len(waiting(client, key)) == 1, what="the waiter queued")
    released_at = time.monotonic()
    assert first.release()
    t.join(5)
    second, granted_at = out[0]
    assert second is not None
    assert granted_at - released_at < 1.0, "granted by the release, not at the lease's end"
    assert second.token > first.token
    assert holders(client, key) == [second.owner]
    assert second.release()


def test_threads_exclude_each_other_on_a_shared_counter(client: dl.Client, key: str) -> None:
    counter = {"n": 0, "inside": 0, "most": 0}

    def work() -> None:
        for _ in range(20):
            with client.lock(key):
                counter["inside"] += 1
                counter["most"] = max(counter["most"], counter["inside"])
                n = counter["n"]
                time.sleep(0.0005)  # another thread would overwrite here without the lock
                counter["n"] = n + 1
                counter["inside"] -= 1

    threads = [threading.Thread(target=work) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter["n"] == 100
    assert counter["most"] == 1


def test_time_out_answers_none_and_leaves_no_waiter(client: dl.Client, key: str) -> None:
    holder = client.lock(key).acquire()
    assert holder is not None
    t, out = in_thread(lambda: (time.monotonic(), client.lock(key).acquire(timeout=0.3),
                                time.monotonic()))
    t.join(5)
    start, got, end = out[0]
    assert got is None
    assert 0.29 <= end - start < 2.0
    assert client.waiters(key) == []
    assert holders(client, key) == [holder.owner]
    holder.release()


def test_keyboard_interrupt_during_a_wait_leaves_no_hold_and_no_waiter(
        client: dl.Client, key: str) -> None:
    t, out = in_thread(lambda: client.lock(key).acquire())
    t.join()
    holder = out[0]

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            client.lock(key).acquire()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert client.waiters(key) == []
    assert holders(client, key) == [holder.owner]
    assert holder.release()
    assert client.info(key).kind == "none"


def test_reentrancy_per_thread(client: dl.Client, key: str) -> None:
    lock = client.lock(key)
    a = lock.acquire()
    b = lock.acquire(timeout=0)
    assert a is not None and b is not None
    assert (a.count, b.count) == (1, 2)
    t, out = in_thread(lambda: lock.acquire(timeout=0))
    t.join()
    assert out == [None], "another thread is another owner"
    assert b.release() is False  # one hold left
    assert holders(client, key) == [a.owner]
    assert a.release() is True
    with pytest.raises(dl.NotHeldError):  # released already: redis-py's LockNotOwnedError
        a.release()


def test_with_blocks_nest(client: dl.Client, key: str) -> None:
    lock = client.lock(key)
    with lock as outer:
        with lock as inner:
            assert inner.count == 2
        assert client.info(key).holders[0].count == 1
        assert not outer.released
    assert client.info(key).kind == "none"


def test_rwlock_rules(client: dl.Client, key: str) -> None:
    rw = client.rwlock(key, lease=5.0)
    r1 = rw.read().acquire()
    t, out = in_thread(lambda: rw.read().acquire(timeout=0))
    t.join()
    r2 = out[0]
    assert r1 is not None and r2 is not None, "readers share"
    with pytest.raises(dl.CommandError, match="upgrade"):
        rw.write().acquire(timeout=0)
    # A writer waits for the readers, and readers that come later queue behind it.
    tw, wout = in_thread(lambda: rw.write().acquire())
    wait_until(lambda: [w.request for w in client.waiters(key)] == ["write"])
    tr, rout = in_thread(lambda: rw.read().acquire(timeout=5))
    wait_until(lambda: [w.request for w in client.waiters(key)] == ["write", "read"])
    r1.release()
    assert not wout, "the writer waits for the last reader"
    r2.release()
    tw.join(5)
    writer = wout[0]
    assert writer is not None and client.info(key).mode == "write"
    assert not rout
    writer.release()
    tr.join(5)
    assert rout[0] is not None and client.info(key).mode == "read"
    rout[0].release()


def test_semaphore_rules(client: dl.Client, key: str) -> None:
    sem = client.semaphore(key, 3, lease=5.0)
    two = sem.acquire(count=2)
    assert two is not None and two.count == 2
    t, out = in_thread(lambda: sem.acquire(timeout=0, count=2))
    t.join()
    assert out == [None], "2 + 2 > 3"
    info = client.info(key)
    assert (info.kind, info.capacity, info.available) == ("semaphore", 3, 1)
    # FIFO: a waiting request for 2 blocks a later request for 1 that would fit.
    tw, wout = in_thread(lambda: sem.acquire(count=2))
    wait_until(lambda: len(client.waiters(key)) == 1)
    t1, out1 = in_thread(lambda: sem.acquire(timeout=0.2))
    t1.join()
    assert out1 == [None]
    assert [w.request for w in client.waiters(key)] == ["permits:2"]
    with pytest.raises(dl.CommandError, match="capacity is 3"):
        client.semaphore(key, 5).acquire(timeout=0)
    assert two.release() is True
    tw.join(5)
    assert wout[0] is not None and wout[0].count == 2
    wout[0].release()
    assert client.info(key).kind == "none"


def test_kill_9_of_a_holder_process(server: Server, client: dl.Client, key: str) -> None:
    """The holder renews while it lives; once killed, the waiter gets the lock when the
    lease (or, where the module binds holds to connections, the grace) runs out."""
    proc, owner = start_holder(server, key, lease=1.0, bind=0.2)

    def alive() -> None:
        assert holders(client, key) == [owner]
        time.sleep(1.5)
        assert holders(client, key) == [owner], "renewed past its lease while alive"

    held, killed_at, granted_at = kill_holder_while_waiting(client, key, proc, 10, alive)
    assert held is not None
    assert granted_at - killed_at < 1.0 + 1.0, "served within the lease (+ margin)"
    assert holders(client, key) == [held.owner]
    held.release()


def test_lost_when_the_key_is_deleted(server: Server, client: dl.Client, key: str) -> None:
    held = client.lock(key, lease=0.6).acquire()
    assert held is not None
    with server.redis() as r:
        r.delete(key)
    assert held.lost.wait(3), "the next renewal answers 0"
    assert held.lost.reason == "not_held"
    with pytest.raises(dl.NotHeldError):
        held.release()


def test_lost_when_the_server_dies(new_server: Any, key: str) -> None:
    srv = new_server()
    c = dl.Client.from_url(srv.url)
    try:
        held = c.lock(key, lease=1.0).acquire()
        assert held is not None
        srv.kill()
        killed_at = time.monotonic()
        assert held.lost.wait(5), "signalled once the lease could not be renewed"
        assert time.monotonic() - killed_at < 1.0 + 1.0, "by the end of the lease (+ margin)"
    finally:
        c.close()


def test_waiters_and_info_are_typed(client: dl.Client, key: str) -> None:
    holder = client.lock(key, fence=True).acquire()
    assert holder is not None
    t, out = in_thread(lambda: client.lock(key).acquire(timeout=5))
    wait_until(lambda: len(client.waiters(key)) == 1)
    (w,) = client.waiters(key)
    assert w.request == "lock" and 0 < w.timeout_left_ms <= 5000 and w.waited_ms >= 0
    info = client.info(key)
    assert (info.kind, info.mode, info.waiters, info.fence) == ("lock", "exclusive", 1,
                                                                holder.token)
    assert info.holders[0] == dl.Holder(holder.owner, "exclusive", 1, info.holders[0].lease_ms)
    holder.release()
    t.join(5)
    assert out[0] is not None
    out[0].release()


def test_owner_ids(client: dl.Client) -> None:
    prefix, thread = client.owner().split(":")
    assert len(prefix) == 32 and int(prefix, 16) >= 0
    assert client.owner() == f"{prefix}:{thread}"
    others = []
    for _ in range(3):  # one after the other: get_ident() would repeat, owners must not
        t, out = in_thread(client.owner)
        t.join()
        others.extend(out)
    assert len(set(others + [client.owner()])) == 4
    assert dl.Client.from_url("redis://127.0.0.1:1/0").owner().split(":")[0] != prefix
