"""What the sync and asyncio APIs share, apart from I/O (sync calls or awaited ones) and the
kind of their events: a hold's fields, a read-write lock's two sides, the client's state and
its factories."""

from __future__ import annotations

import math
from typing import Any, Callable, Generic, Optional, TypeVar

from ._holds import Registry
from ._pools import Pools
from ._protocol import (
    BindSupport,
    Kind,
    Request,
    lock_request,
    new_owner_prefix,
    opt_ms,
    rwlock_request,
    semaphore_request,
)

A = TypeVar("A")
L = TypeVar("L")
RW = TypeVar("RW")
S = TypeVar("S")
H = TypeVar("H", bound="HeldBase")


class HeldBase:
    """``token``: the fencing token (with ``fence=True``); ``count``: the hold count (or the
    permits this acquire took, for a semaphore); ``owner``: who holds it on the server."""

    def __init__(self, request: Request, owner: str, count: int, token: Optional[int]) -> None:
        self._request = request
        self.key = request.key
        self.kind: Kind = request.kind
        self.owner = owner
        self.count = request.count if request.kind == "semaphore" else count
        self.token = token
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def _lost_now(self) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.kind} {self.key!r} owner={self.owner!r} "
                f"count={self.count} token={self.token} lost={self._lost_now()} "
                f"released={self._released})")


class ReadWriteLockBase(Generic[A]):
    """``client.rwlock(name)``: ``.read()`` and ``.write()`` are acquired like a Lock."""

    _side: Callable[[Any, Request], A]

    def __init__(self, client: Any, request: Request) -> None:
        self._client = client
        self._request = request

    def read(self) -> A:
        return self._side(self._client, self._request.read_mode())

    def write(self) -> A:
        return self._side(self._client, self._request)


class ClientBase(Generic[L, RW, S, H]):
    """The state of a client and what it hands out; subclasses do the I/O.

    ``bind``: the grace in seconds after which the server frees a hold whose process died
    (its connections closed); None keeps only the lease. Sent where the server's module
    supports it, else left out. ``command_timeout``: the read time-out of the short commands
    (releases, renewals, INFO); waits have none.
    """

    _held: Callable[[Any, Request, str, int, Optional[int]], H]
    _lock: Callable[[Any, Request], L]
    _rwlock: Callable[[Any, Request], RW]
    _semaphore: Callable[[Any, Request], S]

    def __init__(self, pools: Pools, bind: Optional[float]) -> None:
        self.server, self._waits, self._cmds, self._dog_pool = pools
        self._prefix = new_owner_prefix()
        # Learnt per command: a module may know BIND on its grants before DLOCK.RENEW has it.
        self._bind = BindSupport(opt_ms(bind, "bind"))
        self._bind_renew = BindSupport(opt_ms(bind, "bind"))
        self._registry: Registry[H] = Registry()
        self._dog_sleeps_until = -math.inf  # monotonic time the watchdog wakes by itself

    def lock(self, name: str, *, lease: float = 30.0, fence: bool = False,
             lock_delay: Optional[float] = None) -> L:
        """An exclusive lock, reentrant per owner. `lease` in seconds (the watchdog renews);
        `fence`: grants carry a fencing token; `lock_delay` (seconds): after a hold ends
        without a release, nobody gets the lock for that long."""
        return self._lock(self, lock_request(name, lease, fence, lock_delay))

    def rwlock(self, name: str, *, lease: float = 30.0, fence: bool = False,
               lock_delay: Optional[float] = None) -> RW:
        """A read-write lock; `lock_delay` applies to the write side, as on the server."""
        return self._rwlock(self, rwlock_request(name, lease, fence, lock_delay))

    def semaphore(self, name: str, capacity: int, *, lease: float = 30.0) -> S:
        """`capacity` permits, each holder with its own lease."""
        return self._semaphore(self, semaphore_request(name, capacity, lease))

    def _granted(self, request: Request, owner: str, reply: Any,
                 granted_at: float) -> Optional[H]:
        """The hold for an acquire's reply (None when not granted), handed to the watchdog."""
        grant = request.parse_grant(reply)
        if grant is None:
            return None
        held = self._held(self, request, owner, grant[0], grant[1])
        self._registry.add(held, request.lease_ms, granted_at, self._first_renewal(request))
        return held

    def _first_renewal(self, request: Request) -> float:
        """Seconds from a grant to its first renewal: a third of the lease, and with BIND
        within half the grace. The grant bound the hold to a pooled waiting connection; if
        that connection closes (another wait on it cut short), the server cuts the hold to
        the grace unless the watchdog's RENEW ... BIND has re-bound it to its own."""
        first = request.lease_ms / 3000
        grace = self._bind.arg()
        if self._bind.supported and grace is not None:
            first = min(first, min(grace, request.lease_ms) / 2000)
        return first

    def _watchdog_due(self, request: Request, granted_at: float) -> bool:
        """Whether the watchdog must be woken for a hold granted now: only when it is due
        before the watchdog wakes anyway (most acquires cost the watchdog nothing)."""
        return granted_at + self._first_renewal(request) < self._dog_sleeps_until
