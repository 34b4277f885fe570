"""BIND, LOCKDELAY and DEADLOCK: used where the module has them, refused or left out cleanly
where it does not. The behaviour tests skip on a module without them."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import dlock_client as dl
from conftest import Features
from helpers import in_thread, kill_holder_while_waiting, start_holder, wait_until
from servers import Server


def test_bind_is_detected(client: dl.Client, key: str, features: Features) -> None:
    held = client.lock(key).acquire()
    assert held is not None, "acquires with or without BIND on the server"
    assert client._core.bind.supported is features.bind
    held.release()


def test_lock_delay_without_module_support(client: dl.Client, key: str,
                                           features: Features) -> None:
    if features.lock_delay:
        pytest.skip("the module has LOCKDELAY")
    with pytest.raises(dl.NotSupportedError, match="LOCKDELAY"):
        client.lock(key, lock_delay=1.0).acquire()
    assert client.info(key).kind == "none"


def test_killed_holder_freed_after_the_bind_grace(
        server: Server, client: dl.Client, key: str, features: Features) -> None:
    if not features.bind:
        pytest.skip("the module has no BIND")
    proc, owner = start_holder(server, key, lease=20.0, bind=0.3)
    held, killed_at, _ = kill_holder_while_waiting(client, key, proc, timeout=15)
    assert held is not None
    assert time.monotonic() - killed_at < 3.0, "after the grace, long before the 20 s lease"
    held.release()


def test_bound_hold_survives_its_waiting_connection_closing(
        server: Server, client: dl.Client, key: str, features: Features) -> None:
    """The grant binds the hold to a pooled waiting connection; when that one closes right
    after (another wait on it cut short), the watchdog's early RENEW ... BIND (within half the
    2 s grace) re-binds it before the server's cut lapses, long before lease/3 = 10 s."""
    if not features.bind:
        pytest.skip("the module has no BIND")
    held = client.lock(key, lease=30.0).acquire(timeout=1)
    assert held is not None
    client._waits.connection_pool.disconnect()
    time.sleep(3.0)
    assert not held.lost.is_set()
    assert [h.owner for h in client.info(key).holders] == [held.owner]
    assert client.info(key).lease_ms > 20_000
    held.release()


def test_lock_delay(client: dl.Client, key: str, features: Features) -> None:
    if not features.lock_delay:
        pytest.skip("the module has no LOCKDELAY")
    held = client.lock(key, lease=0.2, lock_delay=1.0).acquire()
    assert held is not None
    client._registry.remove(held)  # stop renewing: the lease lapses without a release
    wait_until(lambda: client.info(key).kind == "none" or client.info(key).delay_ms)
    start = time.monotonic()
    t, out = in_thread(lambda: client.lock(key).acquire(timeout=5))
    t.join(6)
    assert out[0] is not None
    assert time.monotonic() - start >= 0.5, "nobody is granted during the delay"
    out[0].release()


def test_deadlock_is_a_typed_error(client: dl.Client, key: str, features: Features) -> None:
    if not features.deadlock:
        pytest.skip("the module has no deadlock detection")
    k1, k2 = key + ":1", key + ":2"
    errors: list[Any] = []
    b_holds = threading.Event()

    def contender(mine: str, theirs: str, before_waiting: Any) -> None:
        """Holds `mine`, then waits for `theirs`."""
        with client.lock(mine):
            before_waiting()
            try:
                got = client.lock(theirs).acquire(timeout=5)
                if got:
                    got.release()
            except dl.DeadlockError as e:
                errors.append(e)

    def a_waits_after_b_holds() -> None:
        b_holds.wait(5)

    def b_waits_after_a_queued() -> None:
        b_holds.set()
        wait_until(lambda: len(client.waiters(k2)) == 1)

    a = lambda: contender(k1, k2, a_waits_after_b_holds)  # noqa: E731
    b = lambda: contender(k2, k1, b_waits_after_a_queued)  # noqa: E731
    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(15)
    assert len(errors) == 1
    e = errors[0]
    assert str(e).startswith(f"{client.server}: DEADLOCK ")
    assert " waits for " in e.cycle and " held by " in e.cycle
    assert not e.cycle.startswith("DEADLOCK")
    assert client.info(k1).kind == "none" and client.info(k2).kind == "none"
