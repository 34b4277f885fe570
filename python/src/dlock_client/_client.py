"""The client's logic, once, without I/O: the flows the sync and asyncio shells run.

A flow (see :mod:`._effects`) yields requests for I/O and gets their results back. Everything
that decides is here or in the modules it calls: the backend (:mod:`._backend`, native or
script), the holds and their deadlines (:mod:`._holds`), the watchdog (:mod:`._watchdog`),
the cluster's redirects (:mod:`._redirect`), the commands and replies (:mod:`._protocol`);
here: an acquire's one deadline and the confirmation of a waited grant, releasing and
renewing on the user's call, and the errors users see.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar, get_args

import redis.exceptions as rexc

from ._backend import BackendBase, probe, timed_out
from ._effects import Flow, Role
from ._holds import HoldLike, Registry
from ._protocol import (
    BindSupport,
    LockInfo,
    Request,
    Waiter,
    check_seconds,
    new_owner_prefix,
    opt_ms,
    translate,
)
from ._watchdog import Watchdog
from .errors import ConfigError, NotHeldError

T = TypeVar("T")
H = TypeVar("H", bound=HoldLike)

#: ``backend=``: the dlock module where the server has it, else the scripts ("auto"); the
#: module or an error ("native"); always the scripts ("script").
Backend = Literal["auto", "native", "script"]
BACKENDS = get_args(Backend)

#: The response time-out's default, in seconds: the Rust client's (docs/CLIENTS.md).
DEFAULT_RESPONSE_TIMEOUT = 5.0


def check_client(bind: float | None, response_timeout: float, backend: Any) -> None:
    """A client's options, refused (ConfigError) before anything is opened or sent."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    opt_ms(bind, "bind")
    check_seconds(response_timeout, "response_timeout", positive=True)


#: Makes a hold object of the shell's kind: (request, owner, count, token).
MakeHold = Callable[[Request, str, int, int | None], H]


class ClientCore(Generic[H]):
    """The state of one client: its owner ids' prefix, the backend, what BIND support was
    learnt, the registry of holds (with their deadlines) and the watchdog that renews them."""

    def __init__(self, server: str, bind: float | None, backend: Backend,
                 response_timeout: float = DEFAULT_RESPONSE_TIMEOUT) -> None:
        check_client(bind, response_timeout, backend)
        self.server = server
        self.prefix = new_owner_prefix()
        self.response_timeout = response_timeout
        grace_ms = opt_ms(bind, "bind")
        # Learnt per command: a module may know BIND on its grants before DLOCK.RENEW has it.
        self.bind = BindSupport(grace_ms)
        self.bind_renew = BindSupport(grace_ms)
        self.registry: Registry[H] = Registry(None if grace_ms is None else grace_ms / 1000)
        self.watchdog: Watchdog[H] = Watchdog(self)
        self.wanted = backend
        #: The backend serving this client, once known (at once with ``backend="script"``).
        self.backend: BackendBase | None = None
        self._links = itertools.count(1)
        #: Set by a shell serving a Redis Cluster: waits and renewals follow its redirects.
        self.cluster = False
        #: Set by the shell: starts its watchdog (a thread, a task), and wakes it where asked.
        self.start_watchdog: Callable[[bool], None] = lambda wake: None

    @property
    def native(self) -> bool | None:
        """True for the dlock module, False for the scripts, None while not known."""
        if self.backend is None:
            return {"native": True, "script": False}.get(self.wanted)
        return self.backend.native

    def translating(self, flow: Flow[T]) -> Flow[T]:
        """Runs `flow`, raising redis-py's errors as this package's (the cause kept)."""
        try:
            return (yield from flow)
        except rexc.RedisError as error:
            out = translate(error, self.server)
            if out is error:
                raise
            raise out from error

    def new_link(self, role: Role) -> tuple[Role, int]:
        """A link for a connection the core does not follow after this command (a pooled one)."""
        return (role, next(self._links))

    def detect(self) -> Flow[BackendBase]:
        """The backend serving this client (asked once; see :func:`._backend.probe`)."""
        if self.backend is None:
            self.backend = yield from probe(self, self.wanted)
        return self.backend

    def is_native(self) -> Flow[bool]:
        """``client.native_backend()``."""
        return (yield from self.translating(self.detect())).native

    # -- acquiring ----------------------------------------------------------------------

    def acquire(self, request: Request, owner: str, timeout: float | None,
                make: MakeHold[H]) -> Flow[H | None]:
        """Wait for a grant: without limit (None), not at all (<= 0), or `timeout` seconds in
        all. A grant whose lease may already be near its end (its lease began at an unknown
        moment of a long wait) is confirmed before it is returned; one the confirmation finds
        gone is asked for again within the same deadline. The watchdog is started (or woken,
        where the hold is due before it wakes) for a hold returned."""
        held = yield from self.translating(self._acquire(request, owner, timeout, make))
        if held is not None:
            self.start_watchdog(self.watchdog.wake_for(held))
        return held

    def _acquire(self, request: Request, owner: str, timeout: float | None,
                 make: MakeHold[H]) -> Flow[H | None]:
        backend = yield from self.detect()
        backend.check(request)
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            got = yield from backend.try_acquire(request, owner, left)
            if got is None:
                return None
            held = make(request, owner, got.count, got.token)
            entry = self.registry.add(held, request.lease_ms, got.sent, got.link,
                                      self._first_renewal(request), count_holds=got.count == 0)
            if time.monotonic() < entry.next_due:
                return held
            # Already due: the wait outlasted the time a renewal is allowed to wait.
            try:
                confirmed = yield from self.watchdog.confirm(entry)
            except BaseException as error:
                self.registry.remove(held)
                if not timed_out(error):
                    yield from backend.release_quietly(request, owner)
                raise
            if confirmed:
                return held
            held.lost._fire("not_held")
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _first_renewal(self, request: Request) -> float:
        """Seconds from a grant's send time to its first renewal: a third of the lease, and
        with BIND within half the grace (the grant bound the hold to a pooled connection; the
        watchdog's RENEW ... BIND re-binds it to its own)."""
        first = request.lease_ms / 3000
        grace = self.bind.arg()
        if self.bind.supported and grace is not None:
            first = min(first, min(grace, request.lease_ms) / 2000)
        return first

    # -- releasing and renewing ---------------------------------------------------------

    def release(self, hold: H) -> Flow[bool]:
        """``held.release()``: True when this released the owner's last hold (or its last
        permits), False when the owner still holds the key; :class:`NotHeldError` when the
        hold was released already or lost (a lost one's RELEASE is sent all the same: a hold
        lost by its local deadline may still be on the server). A release that fails
        otherwise (no answer) leaves the hold as it was."""
        if hold._released:
            raise not_held(hold, self.server)
        try:
            released = yield from self._release(hold)
        except NotHeldError:
            hold._released = True
            raise
        hold._released = True
        return released

    def _release(self, hold: H) -> Flow[bool]:
        was_lost = hold.lost.is_set()
        detached = self.registry.detach(hold)
        try:
            backend = yield from self.translating(self.detect())
            reply = yield from self.translating(backend.release(hold._request, hold.owner))
        except BaseException:
            self.registry.reattach(hold, detached)
            raise
        if reply is None or was_lost:  # the server says it was not held: it was lost before
            hold.lost._fire("not_held")
            raise not_held(hold, self.server)
        hold.lost._fire("released")
        return bool(reply == 1)

    def renew(self, hold: H) -> Flow[bool]:
        """``held.renew()``: the lease set again now (and the hold bound to the watchdog's
        connection): True; :class:`NotHeldError` when the hold is no longer held (lost,
        released, or the server says so now)."""
        entry = None if hold._released or hold.lost.is_set() else self.registry.entry(hold)
        if entry is None or not (yield from self.translating(self.watchdog.confirm(entry))):
            raise not_held(hold, self.server)
        return True

    def close(self) -> None:
        """The client closed: nothing renews its holds any more, which are lost (``closed``)."""
        for hold in self.registry.clear():
            hold.lost._fire("closed")

    # -- looking -------------------------------------------------------------------------

    def waiters(self, key: str, count: int | None) -> Flow[list[Waiter]]:
        return self.translating(self._look(lambda b: b.waiters(key, count)))

    def info(self, key: str) -> Flow[LockInfo]:
        return self.translating(self._look(lambda b: b.info(key)))

    def _look(self, look: Callable[[BackendBase], Flow[T]]) -> Flow[T]:
        return (yield from look((yield from self.detect())))


def not_held(hold: HoldLike, server: str) -> NotHeldError:
    """The answer to the release of a hold no longer held (released, or lost)."""
    why = "released already" if hold.lost.reason == "released" else \
        f"lost: {hold.lost.reason}"
    return NotHeldError(f"{hold.key!r} is not held by {hold.owner} any more ({why})", server)
