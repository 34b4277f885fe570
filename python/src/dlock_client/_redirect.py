"""What a Redis Cluster node's error reply asks of a request, and the bounds a request keeps
while it follows them: the rules of a waiting acquire on a cluster, without I/O.

A ``DLOCK.ACQUIRE/RWLOCK/SEMAPHORE ... WAIT`` queued on a node that its key leaves (a reshard)
is answered with the error a fresh request would get there (``MOVED``/``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``), having granted nothing. :class:`Follow` carries such a request to the key's
new owner with what is left of its one deadline. The rules are those of the Rust client
(client/src/topology/redirect.rs and call.rs); the sync and asyncio clients run the same
:class:`Follow`, each with its own I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.exceptions as rexc

from ._effects import Flow, Refresh, Sleep
from .errors import RedirectedError

#: At most this many MOVED/ASK one request follows (each a reshard step seen, or a slot map
#: that does not settle); past that it fails with :class:`RedirectedError`.
MAX_REDIRECTS = 16


@dataclass(frozen=True)
class Moved:
    """The slot belongs to the node at `addr` (``host:port``) now: the slot map is stale."""

    addr: str


@dataclass(frozen=True)
class Ask:
    """This request only: the node at `addr`, after ``ASKING`` (the slot is migrating and the
    key is not, or no longer, on the node asked). The slot map stays as it is."""

    addr: str


@dataclass(frozen=True)
class Later:
    """The same node a little later, on a fresh connection: ``TRYAGAIN`` (a slot migrating
    with the request's keys on both sides), ``CLUSTERDOWN``, or the ``UNBLOCKED`` a master
    demoted by a failover answers its blocked clients before it closes their connections
    (asked again, it redirects to the new master)."""


Redirect = Moved | Ask | Later

# redis-py parses these error codes into their own classes and strips the code off the text.
_CODES = ((rexc.MovedError, "MOVED"), (rexc.AskError, "ASK"),
          (rexc.TryAgainError, "TRYAGAIN"), (rexc.ClusterDownError, "CLUSTERDOWN"))


def error_code(error: BaseException) -> tuple[str, str]:
    """An error reply's code and the rest, as the server sent them."""
    text = str(error)
    for cls, code in _CODES:  # MovedError subclasses AskError: MOVED is tried first
        if isinstance(error, cls) and not text.startswith(code):
            return code, text
    code, _, details = text.partition(" ")
    return code, details


def redirect_of(error: BaseException) -> Redirect | None:
    """The redirect an error reply stands for; None for any other error."""
    if not isinstance(error, rexc.ResponseError):
        return None
    code, details = error_code(error)
    if code in ("MOVED", "ASK"):
        parts = details.split(" ")
        if len(parts) < 2 or not parts[1] or ":" not in parts[1]:
            return None  # a redirect without a target is no redirect
        return Moved(parts[1]) if code == "MOVED" else Ask(parts[1])
    if code in ("TRYAGAIN", "CLUSTERDOWN"):
        return Later()
    # Not `CLIENT UNBLOCK ... ERROR`, which means "stop waiting".
    if code == "UNBLOCKED" and "instance state changed" in details:
        return Later()
    return None


class Backoff:
    """Pauses between tries of a request answered TRYAGAIN/CLUSTERDOWN: 10 ms doubling up to
    200 ms, as cluster clients do, while the request's time allows."""

    def __init__(self) -> None:
        self._next = 0.010

    def next_pause(self, left: float | None) -> float | None:
        """The pause (seconds) before the next try when `left` (the time left; None: no
        limit) is longer than it, else None: the time is up."""
        pause = self._next
        if left is not None and left <= pause:
            return None
        self._next = min(self._next * 2, 0.200)
        return pause


@dataclass(frozen=True)
class Try:
    """Where and how to send the next try: `addr` None is the node the slot map names for the
    key; `asking`: ``ASKING`` first; `wait_ms`: the WAIT argument (what is left of the
    deadline, 0 without limit), None for a command without WAIT."""

    addr: str | None
    asking: bool
    wait_ms: int | None


@dataclass(frozen=True)
class Pause:
    """Try again at the same node after `seconds`, on a fresh connection."""

    seconds: float

    def effects(self) -> Flow[None]:
        yield Sleep(self.seconds)


@dataclass(frozen=True)
class Go:
    """Try again at the node `addr` (``ASKING`` first for an ASK); `moved`: read the slot map
    again first."""

    addr: str
    moved: bool

    def effects(self) -> Flow[None]:
        """The slot map read again after a MOVED (the next try goes to `addr` either way)."""
        if self.moved:
            yield Refresh()


Step = Pause | Go


class Follow:
    """One request following the cluster's redirects within one deadline.

    ``deadline`` is a :func:`time.monotonic` time (None: no limit); `waits` says whether the
    request carries ``WAIT`` (each try then asks only for what is left). The I/O loop:
    ``t = f.next_try()`` (None: the time ran out: not granted), send it, and on an error reply
    ``f.after(error)``: a :class:`Pause` or :class:`Go` to act on, None when the error
    is the answer (no redirect, or a TRYAGAIN/CLUSTERDOWN whose time ran out), or
    :class:`RedirectedError` raised past :data:`MAX_REDIRECTS`.
    """

    def __init__(self, key: str, deadline: float | None, waits: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self.deadline = deadline
        self.waits = waits
        self.redirects = 0
        self._clock = clock
        self._addr: str | None = None
        self._asking = False
        self._backoff = Backoff()

    def left(self) -> float | None:
        """Seconds left of the deadline (never negative); None without limit."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - self._clock())

    def next_try(self) -> Try | None:
        left = self.left()
        if left is not None and left <= 0:
            return None
        wait: int | None = None
        if self.waits:
            wait = 0 if left is None else max(1, math.ceil(left * 1000))
        return Try(self._addr, self._asking, wait)

    def after(self, error: BaseException) -> Step | None:
        redirect = redirect_of(error)
        if redirect is None:
            return None
        if isinstance(redirect, Later):
            pause = self._backoff.next_pause(self.left())
            return None if pause is None else Pause(pause)
        if self.redirects == MAX_REDIRECTS:
            raise RedirectedError(
                f"{self.key}: gave up after {self.redirects} cluster redirects (last to "
                f"{redirect.addr}): the slot map does not settle", redirect.addr)
        self.redirects += 1
        self._addr = redirect.addr
        self._asking = isinstance(redirect, Ask)
        return Go(redirect.addr, moved=isinstance(redirect, Moved))
