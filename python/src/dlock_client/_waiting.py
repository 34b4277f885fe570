"""Waiting on a sync connection: bounded in time and cancellable from another thread.

A WAIT runs on a connection of its own with no read time-out (the server answers by the end
of the WAIT), so the sync shell waits for its reply here instead: up to the wait plus one
response time-out (then the connection is closed, which drops the waiter, and redis-py's
``TimeoutError`` is raised), in slices that look at a cancel event where there is one
(``acquire(cancel=)``). Closing the client disconnects the connection, which ends the wait.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis.exceptions as rexc

from .errors import AcquireCancelledError

#: How often a wait looks at its cancel event (and a subscription at the client's closing).
SLICE = 0.05


class CancelLike(Protocol):
    """What ``acquire(cancel=...)`` takes: a :class:`threading.Event` (or anything with
    ``is_set()``); setting it from any thread ends the wait."""

    def is_set(self) -> bool: ...


class Interrupt:
    """What ends a wait early: its cancel event, or the client closing (`stop`)."""

    def __init__(self, cancel: CancelLike | None, stop: Callable[[], None],
                 server: str) -> None:
        self.cancel = cancel
        self.stop = stop  # raises when the client closed
        self.server = server

    def check(self) -> None:
        self.stop()
        if self.cancel is not None and self.cancel.is_set():
            raise AcquireCancelledError(f"acquire cancelled (waiting on {self.server})",
                                        self.server)


def checkout(pool: Any) -> Any:
    """A connection of `pool` (redis-py 5 wants a command name, later ones none)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("DLOCK")


def wait_call(client: Any, args: Sequence[Any], within: float | None,
              interrupt: Interrupt) -> Any:
    """Sends `args` on a connection of `client`'s pool and waits for the reply at most
    `within` seconds (None: without limit); the connection is closed when the wait ends
    otherwise than with a reply (time-out, cancel, close, KeyboardInterrupt)."""
    pool = client.connection_pool
    conn = checkout(pool)
    try:
        conn.send_command(*args)
        if within is not None or interrupt.cancel is not None:
            _ready(conn, within, interrupt)  # else the read blocks until the answer (or close)
        return conn.read_response()
    except rexc.ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _ready(conn: Any, within: float | None, interrupt: Interrupt) -> None:
    end = None if within is None else time.monotonic() + within
    while True:
        interrupt.check()
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            raise rexc.TimeoutError(f"no reply from {interrupt.server} within {within:.3f} s")
        if conn.can_read(timeout=_step(left, interrupt)):
            return


def _step(left: float | None, interrupt: Interrupt) -> float | None:
    """How long to block at once: in slices where there is a cancel event to look at, else
    the time left (None: until an answer; close disconnects the connection, which ends it)."""
    if interrupt.cancel is None:
        return left
    return SLICE if left is None else min(left, SLICE)


def listen(handle: Any, timeout: float | None, interrupt: Interrupt) -> Any:
    """The next pub/sub message within `timeout` seconds (None: without limit), or None."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        interrupt.check()
        left = None if end is None else max(0.0, end - time.monotonic())
        msg = handle.get_message(timeout=SLICE if left is None else min(left, SLICE))
        if msg is not None or (left is not None and left <= SLICE):
            return msg


def sleep(seconds: float, interrupt: Interrupt) -> None:
    end = time.monotonic() + seconds
    while True:
        interrupt.check()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, SLICE))
