"""The client contract (docs/CLIENTS.md) where the Python client once broke it:
- a grant after a wait longer than its lease was born lost;
- a hold cut by BIND while the process was stopped was believed held after it resumed;
- ``asyncio.wait_for(lock.acquire())`` changed the owner (Python < 3.12).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

import dlock_client as dl
from helpers import holders, in_thread, wait_until
from servers import Server


def test_grant_after_a_wait_longer_than_its_lease_is_held_and_renewed(
        server: Server, key: str) -> None:
    with dl.Client.from_url(server.url) as a, dl.Client.from_url(server.url, bind=None) as b:
        first = b.lock(key, lease=60).acquire()
        assert first is not None
        t, out = in_thread(lambda: a.lock(key, lease=1.0).acquire(timeout=5))
        wait_until(lambda: len(b.waiters(key)) == 1, what="a queued")
        time.sleep(2.0)  # twice a's lease
        first.release()
        t.join(5)
        held = out[0]
        assert held is not None
        assert not held.lost.is_set(), "born lost"
        time.sleep(2.5)  # more than two of its leases: renewed all along
        assert not held.lost.is_set()
        assert holders(b, key) == [held.owner]
        assert b.lock(key).acquire(timeout=0) is None, "another client got it"
        assert held.release() is True


async def test_asyncio_grant_after_a_wait_longer_than_its_lease(server: Server,
                                                               key: str) -> None:
    async with dl.asyncio.Client.from_url(server.url) as a, \
            dl.asyncio.Client.from_url(server.url, bind=None) as b:
        first = await b.lock(key, lease=60).acquire()
        assert first is not None
        waiting = asyncio.create_task(a.lock(key, lease=1.0).acquire(timeout=5))
        await asyncio.sleep(2.0)
        await first.release()
        held = await asyncio.wait_for(waiting, 5)
        assert held is not None and not held.lost.is_set(), "born lost"
        await asyncio.sleep(2.5)
        assert not held.lost.is_set()
        assert [h.owner for h in (await b.info(key)).holders] == [held.owner]
        assert await held.release() is True


# A holder process: acquires, then samples held.lost every ms (a sample is kept when it took
# less than 1 ms, so one straddling a SIGSTOP says nothing) and prints the end of the last
# kept "held" sample and the first "lost" one (CLOCK_MONOTONIC, one clock for all processes).
HOLDER = """
import sys, time, dlock_client as dl
c = dl.Client.from_url(sys.argv[1] + "?client_name=stopped-holder", bind=float(sys.argv[4]))
held = c.lock(sys.argv[2], lease=float(sys.argv[3])).acquire()
print(held.owner, flush=True)
last_held = 0.0
while True:
    a = time.monotonic()
    lost = held.lost.is_set()
    b = time.monotonic()
    if b - a < 0.001:
        if lost:
            print(last_held, b, getattr(held.lost, "reason", None), flush=True)
            break
        last_held = b
    time.sleep(0.001)
"""


@pytest.mark.parametrize("grace", [0.5])
def test_hold_cut_while_the_process_was_stopped_is_lost_on_resume(
        server: Server, key: str, grace: float) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, server.url, key, "10", str(grace)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        owner = proc.stdout.readline().strip()
        with dl.Client.from_url(server.url, bind=None) as other, server.redis() as r:
            assert holders(other, key) == [owner]
            time.sleep(0.3)  # a few signs of life
            os.kill(proc.pid, signal.SIGSTOP)
            for c in r.client_list():
                if c["name"] == "stopped-holder":
                    r.client_kill_filter(_id=c["id"])
            held = other.lock(key).acquire(timeout=5)  # the server ends the hold after grace
            granted_at = time.monotonic()
            assert held is not None
            time.sleep(0.5)
            os.kill(proc.pid, signal.SIGCONT)
            resumed_at = time.monotonic()
            last_held, lost_at, reason = proc.stdout.readline().split()
            assert float(last_held) < granted_at, "reported held while another client held it"
            assert float(lost_at) - resumed_at < 0.1, "lost at once on resume"
            assert reason == "lease_expired"
            held.release()
    finally:
        proc.kill()
        proc.wait()


async def test_owner_kept_across_wait_for_and_timeout(server: Server, key: str) -> None:
    async with dl.asyncio.Client.from_url(server.url) as c:
        lock = c.lock(key)
        first = await lock.acquire()
        assert first is not None
        again = await asyncio.wait_for(lock.acquire(timeout=5), 2)
        assert again is not None and again.count == 2 and again.owner == first.owner
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(2):
                third = await lock.acquire(timeout=5)
            assert third is not None and third.count == 3
            assert await third.release() is False

        async def other_task() -> Any:
            return await lock.acquire(timeout=0)

        assert await asyncio.create_task(other_task()) is None, "another task, another owner"
        assert await again.release() is False
        assert await first.release() is True


def test_renew_resets_the_lease_now(server: Server, client: dl.Client, key: str) -> None:
    held = client.lock(key, lease=5.0).acquire()
    assert held is not None
    time.sleep(1.0)
    assert held.renew() is True
    assert client.info(key).holders[0].lease_ms > 4500
    with server.redis() as r:
        r.delete(key)
    with pytest.raises(dl.NotHeldError):
        held.renew()
    assert held.lost.is_set() and held.lost.reason == "not_held"
    with pytest.raises(dl.NotHeldError):
        held.release()


def test_lost_reads_the_clock(client: dl.Client, key: str) -> None:
    """``lost`` answers from the deadline, not from the watchdog having run."""
    held = client.lock(key, lease=1.0).acquire()
    assert held is not None
    client._closed = True  # the watchdog stops: nothing renews, nothing sets lost
    client._dog_wake.set()
    assert client._dog is not None
    client._dog.join()
    client._closed = False
    assert held.lost.wait(3)
    assert held.lost.reason == "lease_expired"


def test_sign_of_life_and_rebinding_after_the_connections_close(server: Server,
                                                               key: str) -> None:
    """A bound hold with nothing to renew for long (lease 30 s) stays valid by the watchdog's
    PING every grace/3; when the client's connections are closed under it (the process
    running), the watchdog reconnects and re-binds the hold before the server's cut (the grace)
    ends, and `lost` does not count the new connection's PING for the old binding."""
    grace = 0.6
    with dl.Client.from_url(server.url + "?client_name=pinged", bind=grace) as c, \
            server.redis() as r:
        held = c.lock(key, lease=30.0).acquire()
        assert held is not None
        pings = int(r.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))
        time.sleep(1.5)
        pinged = int(r.info("commandstats")["cmdstat_ping"]["calls"]) - pings
        assert 3 <= pinged <= 15, f"about one PING per grace/3, got {pinged} in 1.5 s"
        assert not held.lost.is_set()
        for conn in r.client_list():
            if conn["name"] == "pinged":
                r.client_kill_filter(_id=conn["id"])
        time.sleep(1.5)  # more than twice the grace
        assert not held.lost.is_set()
        assert holders(c, key) == [held.owner], "re-bound before the server's cut ended"
        assert held.release() is True
