"""One answer per mistake (docs/CLIENTS.md), cancelling a sync wait from another thread, and
the fallback to scripts logged once."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import pytest
import redis

import dlock_client as dl
from helpers import answer, holders, in_thread, wait_until, waiting
from servers import Server


def test_release_twice_or_after_loss_raises_not_held(server: Server, client: dl.Client,
                                                     key: str) -> None:
    held = client.lock(key).acquire()
    assert held.release() is True and held.lost.reason == "released"
    with pytest.raises(dl.NotHeldError) as raised:
        held.release()
    assert isinstance(raised.value, redis.exceptions.LockNotOwnedError)  # as redis-py's Lock
    lost = client.lock(key).acquire()
    with server.redis() as r:
        r.delete(key)
    with pytest.raises(dl.NotHeldError):
        lost.release()
    assert lost.lost.reason == "not_held"
    with pytest.raises(dl.NotHeldError):
        lost.release()


async def test_asyncio_release_twice_raises_not_held(server: Server, key: str) -> None:
    async with dl.asyncio.Client.from_url(server.url) as c:
        held = await c.lock(key).acquire()
        assert await held.release() is True
        with pytest.raises(dl.NotHeldError):
            await held.release()


BAD_SECONDS = [-1.0, math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("bad", BAD_SECONDS)
def test_bad_time_outs_and_leases_are_refused_before_anything_is_sent(
        client: dl.Client, key: str, bad: float) -> None:
    lock = client.lock(key)
    with pytest.raises(dl.ConfigError):
        lock.acquire(timeout=bad)
    with pytest.raises(dl.ConfigError):
        lock(timeout=bad)
    with pytest.raises(dl.ConfigError):
        client.semaphore(key, 2).acquire(timeout=bad)
    with pytest.raises(dl.ConfigError):
        client.lock(key, lease=bad)
    with pytest.raises(dl.ConfigError):
        client.semaphore(key, 2, lease=bad)
    assert holders(client, key) == [] and waiting(client, key) == []


async def test_asyncio_bad_time_out_is_refused_at_the_call(server: Server, key: str) -> None:
    async with dl.asyncio.Client.from_url(server.url) as c:
        with pytest.raises(dl.ConfigError):
            _ = c.lock(key).acquire(timeout=-1)  # not awaited: refused where it is given


def test_bad_client_options_are_refused_and_leave_nothing_open(server: Server) -> None:
    with server.redis() as r:
        before = len(r.client_list())
        for kwargs in ({"backend": "bogus"}, {"bind": -1.0}, {"bind": 0},
                       {"response_timeout": 0}, {"response_timeout": math.nan},
                       {"response_timeout": -1.0}):
            with pytest.raises(dl.ConfigError):
                dl.Client.from_url(server.url, **kwargs)
            with pytest.raises(dl.ConfigError):
                dl.asyncio.Client.from_url(server.url, **kwargs)
        assert len(r.client_list()) == before


def test_a_semaphore_without_capacity_is_refused(client: dl.Client, key: str) -> None:
    with pytest.raises(dl.ConfigError):
        client.semaphore(key)


def test_cancel_a_wait_from_another_thread(client: dl.Client, key: str) -> None:
    held = client.lock(key).acquire()
    cancel = threading.Event()
    t, out = in_thread(lambda: answer(lambda: client.lock(key).acquire(cancel=cancel)))
    wait_until(lambda: waiting(client, key))
    cancel.set()
    start = time.monotonic()
    t.join(2)
    assert time.monotonic() - start < 1.0
    assert isinstance(out[0], dl.AcquireCancelledError), out
    wait_until(lambda: not waiting(client, key), what="nothing left queued")
    # Set before the call: refused at once, nothing sent.
    t, out = in_thread(lambda: answer(lambda: client.lock(key).acquire(timeout=5,
                                                                        cancel=cancel)))
    t.join(2)
    assert isinstance(out[0], dl.AcquireCancelledError)
    assert held.release() is True
    assert holders(client, key) == []


def test_cancel_a_script_wait(new_server: Any, key: str) -> None:
    srv: Server = new_server(False)
    with dl.Client.from_url(srv.url) as c:
        held = c.lock(key).acquire()
        cancel = threading.Event()
        t, out = in_thread(lambda: answer(lambda: c.lock(key).acquire(cancel=cancel)))
        with srv.redis() as r:
            wait_until(lambda: r.pubsub_numsub(f"redisson_lock__channel:{{{key}}}")[0][1] == 1)
            cancel.set()
            t.join(2)
            assert isinstance(out[0], dl.AcquireCancelledError), out
            wait_until(lambda: r.pubsub_numsub(f"redisson_lock__channel:{{{key}}}")[0][1] == 0)
        assert held.release() is True


def test_the_fallback_to_scripts_is_logged_once(new_server: Any, key: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    srv: Server = new_server(False)
    caplog.set_level(logging.WARNING, logger="dlock_client")
    for _ in range(2):
        with dl.Client.from_url(srv.url) as c:
            assert c.native_backend() is False
    with dl.Client.from_url(srv.url, backend="script") as c:
        c.lock(key).acquire().release()
    records = [r for r in caplog.records if r.name == "dlock_client"]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert f"127.0.0.1:{srv.port}" in records[0].getMessage()
