"""The synchronous API: a Client, its locks, and the watchdog thread.

A thin shell: the logic is :mod:`._core`'s flows, run here with blocking calls (``_run`` and
``_do``: the one place a request reaches a connection).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from typing import Any, List, Optional, TypeVar

import redis
import redis.cluster
import redis.exceptions as rexc
from redis.backoff import NoBackoff
from redis.retry import Retry

from ._core import Backend
from ._common import (
    AcquirableBase,
    BoundedBase,
    ClientBase,
    DogConnectionBase,
    HeldBase,
    ReadWriteLockBase,
)
from ._cluster import ClusterShell
from ._effects import (Call, Flow, Listen, Op, Pipe, Refresh, Replies, Role, Sleep,
                       Subscribe, Unsubscribe)
from ._holds import LostBase
from ._pools import open_pools
from ._protocol import MODULE_BIND_MS, LockInfo, Request, Waiter

T = TypeVar("T")

_thread_numbers = threading.local()
_next_number = itertools.count(1)


class Lost(LostBase):
    """``held.lost``: ``is_set()`` answers, at the moment it is asked, whether the hold is lost
    (the server said it is gone, or its local deadline passed: see docs/CLIENTS.md);
    ``wait(timeout)`` blocks until it is (True) or the time-out passed (False), like
    :meth:`threading.Event.wait`."""

    def __init__(self) -> None:
        super().__init__(threading.Event())

    def wait(self, timeout: Optional[float] = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            waits = [w for w in (self._time_left(),
                                 None if end is None else end - time.monotonic())
                     if w is not None]
            if end is not None and time.monotonic() >= end:
                return False
            self._event.wait(min(waits) if waits else None)
        return True


class Held(HeldBase):
    """A hold the server granted: released with :meth:`release` or by leaving a ``with``.
    ``lost`` (a :class:`Lost`, with :class:`threading.Event`'s ``is_set()`` and ``wait()``)
    says whether the hold is lost, checked against the clock when asked."""

    def __init__(self, client: "Client", request: Request, owner: str, count: int,
                 token: Optional[int]) -> None:
        super().__init__(request, owner, count, token)
        self._client = client
        self.lost = Lost()

    def release(self) -> bool:
        """True when this released the owner's last hold (or these permits were its last);
        False when it still holds the key, or held nothing any more (lost). Idempotent."""
        if self._released:
            return False
        self._released = True
        return self._client._run(self._client._core.release(self, self._request))

    def renew(self) -> bool:
        """Sets the lease again now (the watchdog does it by itself); False when the hold is
        lost or released."""
        if self._released:
            return False
        return self._client._run(self._client._core.renew(self))

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Bounded(BoundedBase):
    """``with lock(timeout=5.0) as held:``: waits up to `timeout` seconds, raises
    :class:`~dlock_client.AcquireTimeoutError` when not granted, releases on exit."""

    _client: "Client"
    _held: Optional[Held] = None

    def __enter__(self) -> Held:
        held = self._client._acquire(self._request, self._timeout)
        if held is None:
            raise self._not_granted()
        self._held = held
        return held

    def __exit__(self, *exc: object) -> None:
        if self._held is not None:
            self._held.release()


class Acquirable(AcquirableBase):
    """Something that can be acquired: a lock, a mode of a read-write lock."""

    _client: "Client"

    def __init__(self, client: "Client", request: Request) -> None:
        super().__init__(client, request)
        self._entered = threading.local()

    def acquire(self, timeout: Optional[float] = None) -> Optional[Held]:
        """Wait in the server's FIFO queue: without limit (None), not at all (0), or up to
        `timeout` seconds. The hold, or None when the time ran out."""
        return self._client._acquire(self._request, timeout)

    def __call__(self, timeout: Optional[float] = None) -> Bounded:
        """``with lock(timeout=5.0) as held:`` (see :class:`Bounded`)."""
        return Bounded(self, timeout, 1)

    def __enter__(self) -> Held:
        held = self.acquire(None)
        assert held is not None  # a wait without limit ends in a grant or an exception
        self._stack().append(held)
        return held

    def __exit__(self, *exc: object) -> None:
        self._stack().pop().release()

    def _stack(self) -> List[Held]:
        stack: Optional[List[Held]] = getattr(self._entered, "stack", None)
        if stack is None:
            stack = self._entered.stack = []
        return stack


class Lock(Acquirable):
    """An exclusive, reentrant lock (per thread). ``client.lock(name)``."""


class ReadWriteLock(ReadWriteLockBase[Acquirable]):
    """``client.rwlock(name)``: ``.read()`` and ``.write()`` are acquired like a Lock."""

    _side = Acquirable


class Semaphore(Acquirable):
    """``client.semaphore(name, capacity)``: permits, each holder with its own lease."""

    def acquire(self, timeout: Optional[float] = None, count: int = 1) -> Optional[Held]:
        return self._client._acquire(self._request.with_count(count), timeout)

    def __call__(self, timeout: Optional[float] = None, count: int = 1) -> Bounded:
        return Bounded(self, timeout, count)


class _DogConnection(DogConnectionBase):
    def __init__(self, pool: Any) -> None:
        super().__init__(pool)
        self._lock = threading.Lock()

    def pipe(self, commands: List[List[Any]]) -> Replies:
        with self._lock:
            conn = self._connection()
            try:
                conn.send_packed_command(conn.pack_commands(commands))
                values: List[Any] = []
                for _ in commands:
                    try:
                        values.append(conn.read_response())
                    except rexc.ResponseError as error:
                        values.append(error)
            except BaseException:
                conn.disconnect()
                raise
            return self._replies(values)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.disconnect()


class Client(ClientBase[Lock, ReadWriteLock, Semaphore, Held]):
    """A dlock client over a redis-py client, which says where the server is (``bind``: the
    grace in seconds for a crashed process's holds; ``command_timeout``: the read time-out of
    short commands; ``backend``: ``"auto"``, ``"native"`` or ``"script"``; all explained in
    ``dlock_client._common.ClientBase``)."""

    _held, _lock, _rwlock, _semaphore = Held, Lock, ReadWriteLock, Semaphore

    def __init__(self, redis_client: "redis.Redis | redis.cluster.RedisCluster", *,
                 bind: Optional[float] = MODULE_BIND_MS / 1000, command_timeout: float = 5.0,
                 backend: Backend = "auto") -> None:
        retry = Retry(NoBackoff(), 0)
        self._cluster: Optional[ClusterShell] = None
        if isinstance(redis_client, redis.cluster.RedisCluster):
            self._cluster = ClusterShell(redis_client, retry, command_timeout, _DogConnection)
        super().__init__(
            open_pools(redis_client, redis.Redis, retry, command_timeout)
            if self._cluster is None else self._cluster.nodes.pools(), bind, backend)
        self._core.cluster = self._cluster is not None
        self._dog: Optional[threading.Thread] = None
        self._dog_wake = threading.Event()
        self._closed = threading.Event()
        self._dog_lock = threading.Lock()
        self._dog_conn = _DogConnection(self._dog_pool)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "Client":
        """``Client.from_url("redis://127.0.0.1:6379/0")``; keyword arguments go to Client."""
        return cls(redis.Redis.from_url(url), **kwargs)

    # -- what users call --------------------------------------------------------------

    def owner(self) -> str:
        """This thread's owner id: ``<128-bit random id of the client>:<n>``, where n numbers
        the threads of the process (a thread's id, unlike ``threading.get_ident()``, is never
        reused by a later thread, which must not inherit a finished thread's holds)."""
        n: Optional[int] = getattr(_thread_numbers, "n", None)
        if n is None:
            n = _thread_numbers.n = next(_next_number)
        return f"{self._prefix}:{n}"

    def native_backend(self) -> bool:
        """True when the dlock module serves this client, False for the script backend (asks
        the server the first time, with ``backend="auto"``)."""
        return self._run(self._core.translating(self._core.detect()))

    def waiters(self, name: str, count: Optional[int] = None) -> List[Waiter]:
        """``DLOCK.WAITERS``: who waits on `name`, in FIFO order (native backend)."""
        return self._run(self._core.waiters(name, count))

    def info(self, name: str) -> LockInfo:
        """``DLOCK.INFO``: kind, holders, waiters, last fencing token (native backend)."""
        return self._run(self._core.info(name))

    def close(self) -> None:
        """Stops the watchdog and closes the connections. Holds not released are freed by the
        server when their lease ends, or after the bind grace where the module has BIND."""
        self._closed.set()
        self._dog_wake.set()
        if self._dog is not None and self._dog is not threading.current_thread():
            self._dog.join()
        if self._cluster is not None:
            self._cluster.close()
            return
        self._waits.close()
        self._cmds.close()
        self._waits.connection_pool.disconnect()
        self._cmds.connection_pool.disconnect()
        self._dog_conn.close()
        self._dog_pool.disconnect()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the shell: running flows -----------------------------------------------------

    def _acquire(self, request: Request, timeout: Optional[float]) -> Optional[Held]:
        held = self._run(self._core.acquire(request, self.owner(), timeout, self._make_held))
        if held is not None:
            self._start_watchdog(self._core.wake_for(held))
        return held

    def _run(self, flow: Flow[T]) -> T:
        """Runs a flow of the core: each request it yields is served by :meth:`_do`."""
        try:
            op = next(flow)
            while True:
                try:
                    result = self._do(op)
                except BaseException as error:
                    op = flow.throw(error)
                else:
                    op = flow.send(result)
        except StopIteration as stop:
            value: T = stop.value
            return value

    def _do(self, op: Op) -> Any:
        """Where a request reaches a connection (a cluster client routes here by ``op.key``)."""
        if self._cluster is not None and isinstance(op, (Call, Pipe, Refresh)):
            return self._cluster.do(op)
        if isinstance(op, Refresh):
            return None
        if isinstance(op, Call):
            conn = self._waits if op.role is Role.WAIT else self._cmds
            return conn.execute_command(*op.args)
        if isinstance(op, Pipe):
            return self._dog_conn.pipe([list(c) for c in op.commands])
        if isinstance(op, Subscribe):
            # On a cluster, on the node serving the key (a PUBLISH reaches every node).
            waits = self._waits if self._cluster is None else self._cluster.waits_for(op.key)
            ps = waits.pubsub()
            ps.subscribe(op.channel)
            return ps
        if isinstance(op, Listen):
            return op.handle.get_message(timeout=op.timeout)
        if isinstance(op, Unsubscribe):
            op.handle.close()
            return None
        if isinstance(op, Sleep):
            time.sleep(op.seconds)
            return None
        raise TypeError(op)

    # -- the watchdog -----------------------------------------------------------------

    def _start_watchdog(self, wake: bool) -> None:
        if wake:
            self._dog_wake.set()
        if self._dog is not None:
            return
        with self._dog_lock:
            if self._dog is None and not self._closed.is_set():
                self._dog = threading.Thread(target=self._watch, name="dlock-watchdog",
                                             daemon=True)
                self._dog.start()

    def _watch(self) -> None:
        core = self._core
        while not self._closed.is_set():
            core.dog_sleeps_until = -math.inf  # an acquire meanwhile wakes it
            now = time.monotonic()
            wake = core.next_wake(now)
            core.dog_sleeps_until = math.inf if wake is None else now + wake
            self._dog_wake.wait(timeout=wake)
            self._dog_wake.clear()
            if self._closed.is_set():
                break
            self._run(core.watch_round())
