"""Every call is bounded (docs/CLIENTS.md): with the server stopped (SIGSTOP of a server the
test started), a wait answers within its time-out plus one response time-out, release, renew,
a zero wait, info and connecting within one response time-out, close within one, and
``held.lost`` still at the hold's deadline."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import dlock_client as dl
from helpers import answer, in_thread, wait_until, waiting
from servers import Server

RT = 0.5  # the response time-out of these tests' clients
SLACK = 0.8  # a busy 2-core machine


@contextlib.contextmanager
def hung(srv: Server) -> Iterator[None]:
    """The server stopped (SIGSTOP) for the block; resumed even when the test fails."""
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(what `fn` answered or raised, seconds it took)."""
    start = time.monotonic()
    out = answer(fn)
    return out, time.monotonic() - start


def test_a_wait_answers_within_its_time_out_plus_one_response_time_out(
        new_server: Any, key: str) -> None:
    srv: Server = new_server()
    with dl.Client.from_url(srv.url, response_timeout=RT, bind=None) as holder, \
            dl.Client.from_url(srv.url, response_timeout=RT, bind=None) as c:
        held = holder.lock(key).acquire()
        t, out = in_thread(lambda: timed(lambda: c.lock(key).acquire(timeout=1.5)))
        wait_until(lambda: waiting(holder, key))
        with hung(srv):
            t.join(1.5 + RT + SLACK + 1)
            assert out, "the wait still blocks"
            error, took = out[0]
        assert isinstance(error, dl.ResponseTimeoutError), error
        assert isinstance(error, TimeoutError) and str(srv.port) in str(error)
        assert 1.0 <= took <= 1.5 + RT + SLACK, took
        wait_until(lambda: not waiting(holder, key), what="the waiter dropped on resume")
        assert held.release() is True


@pytest.mark.parametrize("call", ["release", "renew", "zero_wait", "info", "connect"])
def test_short_calls_answer_within_one_response_time_out(new_server: Any, key: str,
                                                         call: str) -> None:
    srv: Server = new_server()
    with dl.Client.from_url(srv.url, response_timeout=RT, bind=None) as c, \
            dl.Client.from_url(srv.url, response_timeout=RT) as fresh:
        held = c.lock(key).acquire()
        calls: dict[str, Callable[[], Any]] = {
            "release": held.release, "renew": held.renew, "info": lambda: c.info(key),
            "zero_wait": lambda: c.lock(key + "2").acquire(timeout=0),
            "connect": fresh.native_backend,  # its first connection
        }
        with hung(srv):
            error, took = timed(calls[call])
        assert isinstance(error, dl.ResponseTimeoutError), error
        assert took <= RT + SLACK, took
        if call == "release":
            # The state is unknown (the server runs the RELEASE it read when it resumes): the
            # hold is not taken for released, and a second release frees it or says it was.
            assert not held.released
            with contextlib.suppress(dl.NotHeldError):
                held.release()
            assert c.info(key).holders == ()


def test_close_answers_and_ends_a_pending_wait_while_the_server_hangs(
        new_server: Any, key: str) -> None:
    srv: Server = new_server()
    holder = dl.Client.from_url(srv.url)
    c = dl.Client.from_url(srv.url, response_timeout=RT)
    try:
        held = holder.lock(key).acquire()
        t, out = in_thread(lambda: timed(lambda: c.lock(key).acquire()))
        wait_until(lambda: waiting(holder, key))
        with hung(srv):
            _, took = timed(c.close)
            t.join(2)
        assert took <= RT + SLACK, took
        assert out and isinstance(out[0][0], dl.ClientClosedError), out
        wait_until(lambda: not waiting(holder, key), what="the waiter dropped on resume")
        held.release()
    finally:
        holder.close()


def test_lost_fires_on_time_while_the_server_hangs(new_server: Any, key: str) -> None:
    srv: Server = new_server()
    with dl.Client.from_url(srv.url, response_timeout=RT) as c:
        held = c.lock(key, lease=1.0).acquire()
        with hung(srv):
            start = time.monotonic()
            assert held.lost.wait(1.0 + SLACK + 1)
            took = time.monotonic() - start
        assert took <= 1.0 + SLACK, took
        assert held.lost.reason == "lease_expired"
        with pytest.raises(dl.NotHeldError):
            held.release()


async def test_asyncio_calls_are_bounded(new_server: Any, key: str) -> None:
    srv: Server = new_server()
    holder = dl.asyncio.Client.from_url(srv.url, response_timeout=RT, bind=None)
    c = dl.asyncio.Client.from_url(srv.url, response_timeout=RT, bind=None)
    try:
        held = await holder.lock(key).acquire()
        wait = asyncio.create_task(c.lock(key).acquire(timeout=1.5))
        pending = asyncio.create_task(c.lock(key).acquire())  # another task: another owner
        while len(await holder.waiters(key)) < 2:
            await asyncio.sleep(0.01)
        with hung(srv):
            start = time.monotonic()
            with pytest.raises(dl.ResponseTimeoutError):
                await wait
            took = time.monotonic() - start
            assert 1.0 <= took <= 1.5 + RT + SLACK, took
            start = time.monotonic()
            with pytest.raises(dl.ResponseTimeoutError):
                await held.release()
            assert time.monotonic() - start <= RT + SLACK
            start = time.monotonic()
            await c.aclose()
            assert time.monotonic() - start <= RT + SLACK
            with pytest.raises(dl.ClientClosedError):
                await pending
        # Its first RELEASE ran when the server resumed (handing the lock to the next
        # waiter, whose connection the server had not yet seen closed): not held any more.
        with pytest.raises(dl.NotHeldError):
            await held.release()
        assert held.owner not in [h.owner for h in (await holder.info(key)).holders]
    finally:
        await holder.aclose()
        await c.aclose()
