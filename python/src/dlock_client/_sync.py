"""The synchronous API: a Client, its locks, and the watchdog thread.

A thin shell: the logic is :mod:`._client`'s flows, run here with blocking calls (``_run`` and
``_do``: the one place a request reaches a connection), and the watchdog's thread.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, TypeVar, overload

import redis
import redis.cluster
from redis.retry import Retry

from . import _effects as fx
from . import _shell
from ._cluster import ClusterShell
from ._drive import drive, run_steps
from ._holds import LostBase
from ._protocol import LockInfo, Request, Waiter, check_timeout
from ._waiting import CancelLike, Interrupt, listen, sleep, wait_call
from .errors import DlockError

T = TypeVar("T")
E = TypeVar("E")

_thread_numbers = threading.local()
_next_number = itertools.count(1)


class Lost(LostBase):
    """``held.lost``: ``is_set()`` answers, at the moment it is asked, whether the hold is lost
    (the server said it is gone, or its local deadline passed: see docs/CLIENTS.md);
    ``wait(timeout)`` blocks until it is (True) or the time-out passed (False), like
    :meth:`threading.Event.wait`."""

    def __init__(self) -> None:
        super().__init__(threading.Event())

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            waits = [w for w in (self._time_left(),
                                 None if end is None else end - time.monotonic())
                     if w is not None]
            if end is not None and time.monotonic() >= end:
                return False
            self._event.wait(min(waits) if waits else None)
        return True


class _Scoped(_shell.ScopedBase[E]):
    """``with``: entering and leaving run the object's flows (see :mod:`._shell`)."""

    _client: Client

    def __enter__(self) -> E:
        return self._client._run(self._enter_flow())

    def __exit__(self, *exc: object) -> None:
        self._client._run(self._exit_flow())


class Held(_shell.HeldBase, _Scoped["Held"]):
    """A hold the server granted: released with :meth:`release` or by leaving a ``with``.
    ``lost`` (a :class:`Lost`, with :class:`threading.Event`'s ``is_set()`` and ``wait()``)
    says whether the hold is lost, checked against the clock when asked."""

    _lost = Lost
    lost: Lost
    _client: Client

    def release(self) -> bool:
        """True when this released the owner's last hold (or these permits were its last);
        False when the owner still holds the key (reentered). Raises
        :class:`~dlock_client.NotHeldError` when the hold is no longer held (released
        already, or lost), as redis-py's ``Lock.release()`` raises ``LockNotOwnedError``."""
        return self._client._run(self._client._core.release(self))

    def renew(self) -> bool:
        """Sets the lease again now (the watchdog does it by itself): True;
        :class:`~dlock_client.NotHeldError` when the hold is no longer held (lost or
        released), as :meth:`release`."""
        return self._client._run(self._client._core.renew(self))

    def __enter__(self) -> Held:
        return self


class Bounded(_shell.BoundedBase, _Scoped[Held]):
    """``with lock(timeout=5.0) as held:``: waits up to `timeout` seconds, raises
    :class:`~dlock_client.AcquireTimeoutError` when not granted, releases on exit."""


class Acquirable(_shell.AcquirableBase, _Scoped[Held]):
    """Something that can be acquired: a lock, a mode of a read-write lock."""

    _client: Client
    _entered_store = threading.local

    @overload
    def acquire(self, timeout: None = None, *, cancel: CancelLike | None = None) -> Held: ...

    @overload
    def acquire(self, timeout: float | None, *,
                cancel: CancelLike | None = None) -> Held | None: ...

    def acquire(self, timeout: float | None = None, *,
                cancel: CancelLike | None = None) -> Held | None:
        """Wait in the server's FIFO queue: without limit (None), not at all (0), or up to
        `timeout` seconds. The hold, or None when the time ran out. `cancel`: a
        :class:`threading.Event`; setting it (from any thread) ends the wait with
        :class:`~dlock_client.AcquireCancelledError`, leaving nothing held or queued."""
        return self._client._acquire(self._request, check_timeout(timeout), cancel)

    def __call__(self, timeout: float | None = None) -> Bounded:
        """``with lock(timeout=5.0) as held:`` (see :class:`Bounded`)."""
        return Bounded(self, timeout, 1)

    def _stack(self) -> list[Held]:
        stack: list[Held] | None = getattr(self._entered, "stack", None)
        if stack is None:
            stack = self._entered.stack = []
        return stack


class Lock(Acquirable):
    """An exclusive, reentrant lock (per thread). ``client.lock(name)``."""


class ReadWriteLock(_shell.ReadWriteLockBase[Acquirable]):
    """``client.rwlock(name)``: ``.read()`` and ``.write()`` are acquired like a Lock."""

    _side = Acquirable


class Semaphore(Acquirable):
    """``client.semaphore(name, capacity)``: permits, each holder with its own lease."""

    @overload
    def acquire(self, timeout: None = None, count: int = 1, *,
                cancel: CancelLike | None = None) -> Held: ...

    @overload
    def acquire(self, timeout: float | None, count: int = 1, *,
                cancel: CancelLike | None = None) -> Held | None: ...

    def acquire(self, timeout: float | None = None, count: int = 1, *,
                cancel: CancelLike | None = None) -> Held | None:
        """`count` permits (see :meth:`Acquirable.acquire`)."""
        return self._client._acquire(self._request.with_count(count), check_timeout(timeout),
                                     cancel)

    def __call__(self, timeout: float | None = None, count: int = 1) -> Bounded:
        return Bounded(self, timeout, count)


class _DogConnection(_shell.DogConnectionBase):
    def __init__(self, pool: Any) -> None:
        super().__init__(pool)
        self._lock = threading.Lock()

    def pipe(self, commands: list[list[Any]]) -> fx.Replies:
        with self._lock:
            return run_steps(self._exchange(commands))

    def close(self) -> None:
        """Closes the connection, also under a renewal reading on it (which then fails)."""
        if self._conn is not None:
            self._conn.disconnect()


class Client(_shell.ClientBase[Lock, ReadWriteLock, Semaphore, Held,
                               redis.Redis | redis.cluster.RedisCluster, ClusterShell,
                               _DogConnection]):
    """A dlock client over a redis-py client, which says where the server is (``bind``: the
    grace in seconds for a crashed process's holds; ``response_timeout``: how long the server
    may take to answer, default 5 s; ``backend``: ``"auto"``, ``"native"`` or ``"script"``;
    all explained in ``dlock_client._shell.ClientBase``). ``command_timeout`` is the former
    name of ``response_timeout``."""

    _held, _lock, _rwlock, _semaphore = Held, Lock, ReadWriteLock, Semaphore

    _redis, _redis_cluster, _retry = redis.Redis, redis.cluster.RedisCluster, Retry
    _cluster_shell, _dog_connection, _event = ClusterShell, _DogConnection, threading.Event

    def _open_shell(self) -> None:
        self._dog: threading.Thread | None = None
        self._dog_lock = threading.Lock()
        # Flows in flight (close waits for them).
        self._state = threading.Condition()
        self._running = 0

    # -- what users call --------------------------------------------------------------

    def owner(self) -> str:
        """This thread's owner id: ``<128-bit random id of the client>:<n>``, where n numbers
        the threads of the process (a thread's id, unlike ``threading.get_ident()``, is never
        reused by a later thread, which must not inherit a finished thread's holds)."""
        n: int | None = getattr(_thread_numbers, "n", None)
        if n is None:
            n = _thread_numbers.n = next(_next_number)
        return f"{self._prefix}:{n}"

    def native_backend(self) -> bool:
        """True when the dlock module serves this client, False for the script backend (asks
        the server the first time, with ``backend="auto"``)."""
        return self._run(self._core.is_native())

    def waiters(self, name: str, count: int | None = None) -> list[Waiter]:
        """``DLOCK.WAITERS``: who waits on `name`, in FIFO order (native backend)."""
        return self._run(self._core.waiters(name, count))

    def info(self, name: str) -> LockInfo:
        """``DLOCK.INFO``: kind, holders, waiters, last fencing token (native backend)."""
        return self._run(self._core.info(name))

    def close(self) -> None:
        """Stops the watchdog and closes every connection of the client, within one response
        time-out: waits in flight raise :class:`~dlock_client.ClientClosedError` (nothing
        left queued), holds not released are lost (``reason == "closed"``) and freed by the
        server when their lease ends, or after the bind grace where the module has BIND.
        Every later call raises ``ClientClosedError``; closing again does nothing."""
        with self._state:
            if self._closed:
                return
            self._closed = True
        end = time.monotonic() + self._core.response_timeout
        self._core.close()
        self._dog_wake.set()
        self._disconnect()  # what is in flight fails now
        with self._state:
            while self._running and time.monotonic() < end:
                self._state.wait(max(0.0, end - time.monotonic()))
        if self._dog is not None and self._dog is not threading.current_thread():
            self._dog.join(max(0.0, end - time.monotonic()))
        self._disconnect()  # what reconnected meanwhile

    def _disconnect(self) -> None:
        with self._state:
            pubsubs = list(self._pubsubs)
        for ps in pubsubs:
            if ps.connection is not None:
                ps.connection.disconnect()
        self._dog_conn.close()
        if self._cluster is not None:
            self._cluster.close()
            return
        for pool in (self._waits.connection_pool, self._cmds.connection_pool, self._dog_pool):
            pool.disconnect()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the shell: running flows -----------------------------------------------------

    def _acquire(self, request: Request, timeout: float | None,
                 cancel: CancelLike | None = None) -> Held | None:
        return self._run(self._core.acquire(request, self.owner(), timeout, self._make_held),
                         cancel)

    def _run(self, flow: fx.Flow[T], cancel: CancelLike | None = None) -> T:
        """Runs a flow of the core: each request it yields is served by :meth:`_do`. A flow
        that fails because the client closed meanwhile raises ``ClientClosedError``."""
        with self._state:
            if self._closed:
                flow.close()
                raise self._closed_error()
            self._running += 1
        interrupt = Interrupt(cancel, self._check_open, self.server)
        calm = Interrupt(None, self._check_open, self.server)  # a clean-up is not cancelled
        try:
            return drive(self._driver(flow), lambda op: self._do(
                op, calm if getattr(op, "cleanup", False) else interrupt))
        finally:
            with self._state:
                self._running -= 1
                self._state.notify_all()

    def _do(self, op: fx.Op, interrupt: Interrupt) -> Any:
        """Where a request reaches a connection (a cluster client routes here by ``op.key``)."""
        if isinstance(op, fx.Unsubscribe):  # also once closed: it closes a connection
            self._unsubscribe(op.handle)
            return None
        interrupt.check()
        if self._cluster is not None and isinstance(op, (fx.Call, fx.Pipe, fx.Refresh)):
            return self._cluster.do(op, interrupt)
        if isinstance(op, fx.Refresh):
            return None
        if isinstance(op, fx.Call):
            if op.role is fx.Role.WAIT:
                return wait_call(self._waits, op.args, op.reply_within, interrupt)
            return self._cmds.execute_command(*op.args)
        if isinstance(op, fx.Pipe):
            return self._dog_conn.pipe([list(c) for c in op.commands])
        if isinstance(op, fx.Subscribe):
            # On a cluster, on the node serving the key (a PUBLISH reaches every node).
            waits = self._waits if self._cluster is None else self._cluster.waits_for(op.key)
            ps = waits.pubsub()
            with self._state:
                self._pubsubs.add(ps)
            try:
                ps.subscribe(op.channel)
            except BaseException:
                self._unsubscribe(ps)
                raise
            return ps
        if isinstance(op, fx.Listen):
            return listen(op.handle, op.timeout, interrupt)
        if isinstance(op, fx.Sleep):
            sleep(op.seconds, interrupt)
            return None
        raise TypeError(op)

    def _unsubscribe(self, ps: Any) -> None:
        with self._state:
            self._pubsubs.discard(ps)
        ps.close()

    # -- the watchdog -----------------------------------------------------------------

    def _start_watchdog(self, wake: bool) -> None:
        if wake:
            self._dog_wake.set()
        if self._dog is not None:
            return
        with self._dog_lock:
            if self._dog is None and not self._closed:
                self._dog = threading.Thread(target=self._watch, name="dlock-watchdog",
                                             daemon=True)
                self._dog.start()

    def _watch(self) -> None:
        dog = self._core.watchdog
        while not self._closed:
            self._dog_wake.wait(timeout=dog.doze())
            self._dog_wake.clear()
            if self._closed:
                break
            try:
                self._run(dog.round())
            except DlockError:
                break  # closed meanwhile


