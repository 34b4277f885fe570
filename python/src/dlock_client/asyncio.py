"""The asyncio API: the same names as :mod:`dlock_client`, awaited.

```python
import dlock_client as dl

client = dl.asyncio.Client.from_url("redis://127.0.0.1:6379/0")
async with client.lock("invoice:7") as held:
    ...
held = await client.lock("x").acquire(timeout=1.0)
await held.release()
await client.aclose()
```

Owners are per task, and the owner of an ``acquire()`` is the task that *calls* it (kept in a
context variable): ``asyncio.wait_for(lock.acquire(), 5)`` and ``asyncio.timeout`` keep the
caller's owner, though ``wait_for`` runs the coroutine in a task of its own on Python < 3.12.
Two tasks exclude each other, a task re-entering its own lock counts up.

A thin shell: the logic is :mod:`._client`'s flows, awaited here (``_run`` and ``_do``: the one
place a request reaches a connection), and the watchdog's task.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import weakref
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar, overload

import redis.asyncio as aredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry

from . import _effects as fx
from . import _shell
from ._cluster import AsyncClusterShell
from ._drive import adrive, arun_steps
from ._holds import LostBase
from ._protocol import LockInfo, Request, Waiter, check_timeout

__all__ = ["Acquirable", "Bounded", "Client", "Held", "Lock", "Lost", "ReadWriteLock",
           "Semaphore"]

T = TypeVar("T")
E = TypeVar("E")

_task_numbers = itertools.count(1)
#: The owner number of the task whose context this is: (the task, its number). A task created
#: from another copies its context, so the task is kept too: a copy in another task is not
#: that task's owner.
_owner_number: contextvars.ContextVar[tuple[weakref.ref[asyncio.Task[Any]], int] | None] = (
    contextvars.ContextVar("dlock_owner_number", default=None))


class Lost(LostBase):
    """``held.lost``: ``is_set()`` answers, at the moment it is asked, whether the hold is lost
    (see :class:`dlock_client.Lost`); ``await wait()`` returns once it is, like
    :meth:`asyncio.Event.wait`."""

    def __init__(self) -> None:
        super().__init__(asyncio.Event())

    async def wait(self) -> bool:
        while not self.is_set():
            left = self._time_left()
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except asyncio.TimeoutError:
                pass
        return True


class _Scoped(_shell.ScopedBase[E]):
    """``async with``: entering and leaving run the object's flows (see :mod:`._shell`)."""

    _client: Client

    async def __aenter__(self) -> E:
        return await self._client._run(self._enter_flow())

    async def __aexit__(self, *exc: object) -> None:
        await self._client._run(self._exit_flow())


class Held(_shell.HeldBase, _Scoped["Held"]):
    """A hold the server granted; ``lost`` is a :class:`Lost` (``is_set()``, ``await
    wait()``). See :class:`dlock_client.Held`."""

    _lost = Lost
    lost: Lost
    _client: Client

    async def release(self) -> bool:
        """True when this released the owner's last hold; False when it still holds the key
        (reentered); :class:`~dlock_client.NotHeldError` when it is no longer held (released
        already, or lost). See :meth:`dlock_client.Held.release`."""
        return await self._client._run(self._client._core.release(self))

    async def renew(self) -> bool:
        """Sets the lease again now: True; :class:`~dlock_client.NotHeldError` when the hold
        is no longer held (lost or released)."""
        return await self._client._run(self._client._core.renew(self))

    async def __aenter__(self) -> Held:
        return self


class Bounded(_shell.BoundedBase, _Scoped[Held]):
    """``async with lock(timeout=5.0) as held:``: waits up to `timeout` seconds, raises
    :class:`~dlock_client.AcquireTimeoutError` when not granted, releases on exit."""


class Acquirable(_shell.AcquirableBase, _Scoped[Held]):
    """See :class:`dlock_client.Acquirable`; owners are tasks."""

    _client: Client
    _entered: weakref.WeakKeyDictionary[asyncio.Task[Any], list[Held]]
    _entered_store = weakref.WeakKeyDictionary

    @overload
    def acquire(self, timeout: None = None) -> Coroutine[Any, Any, Held]: ...

    @overload
    def acquire(self, timeout: float | None) -> Coroutine[Any, Any, Held | None]: ...

    def acquire(self, timeout: float | None = None
                ) -> Coroutine[Any, Any, Held | None]:
        """Wait in the server's FIFO queue: without limit (None), not at all (0), or up to
        `timeout` seconds. The hold, or None when the time ran out. The owner is the task
        that calls this (not the one that awaits it). Cancelling the call leaves nothing held
        and nothing queued. A bad `timeout` raises ConfigError here, not when awaited."""
        return self._client._acquire(self._request, check_timeout(timeout),
                                     self._client._caller_owner())

    def __call__(self, timeout: float | None = None) -> Bounded:
        """``async with lock(timeout=5.0) as held:`` (see :class:`Bounded`)."""
        return Bounded(self, timeout, 1)

    def _stack(self) -> list[Held]:
        task = asyncio.current_task()
        assert task is not None
        return self._entered.setdefault(task, [])


class Lock(Acquirable):
    """An exclusive lock, reentrant per task."""


class ReadWriteLock(_shell.ReadWriteLockBase[Acquirable]):
    _side = Acquirable


class Semaphore(Acquirable):
    @overload
    def acquire(self, timeout: None = None, count: int = 1) -> Coroutine[Any, Any, Held]: ...

    @overload
    def acquire(self, timeout: float | None, count: int = 1
                ) -> Coroutine[Any, Any, Held | None]: ...

    def acquire(self, timeout: float | None = None, count: int = 1
                ) -> Coroutine[Any, Any, Held | None]:
        return self._client._acquire(self._request.with_count(count), check_timeout(timeout),
                                     self._client._caller_owner())

    def __call__(self, timeout: float | None = None, count: int = 1) -> Bounded:
        return Bounded(self, timeout, count)


class _DogConnection(_shell.DogConnectionBase):
    def __init__(self, pool: Any) -> None:
        super().__init__(pool)
        self._lock: asyncio.Lock | None = None  # made on the loop that uses it

    async def pipe(self, commands: list[list[Any]]) -> fx.Replies:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await arun_steps(self._exchange(commands))

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.disconnect()


class Client(_shell.ClientBase[Lock, ReadWriteLock, Semaphore, Held,
                               aredis.Redis | aredis.cluster.RedisCluster, AsyncClusterShell,
                               _DogConnection]):
    """See :class:`dlock_client.Client`; the watchdog is a task of the running loop."""

    _held, _lock, _rwlock, _semaphore = Held, Lock, ReadWriteLock, Semaphore

    _redis, _redis_cluster, _retry = aredis.Redis, aredis.cluster.RedisCluster, Retry
    _cluster_shell, _dog_connection, _event = AsyncClusterShell, _DogConnection, asyncio.Event

    def _open_shell(self) -> None:
        self._dog: asyncio.Task[None] | None = None
        # I/O in flight (aclose cancels it).
        self._inflight: set[asyncio.Future[Any]] = set()

    def owner(self) -> str:
        """This task's owner id: ``<128-bit random id of the client>:task-<n>``."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("dlock_client.asyncio needs a running task")
        mine = _owner_number.get()
        if mine is not None and mine[0]() is task:
            n = mine[1]
        else:
            n = next(_task_numbers)
            _owner_number.set((weakref.ref(task), n))
        return f"{self._prefix}:task-{n}"

    def _caller_owner(self) -> str | None:
        """The owner of the task calling now; None outside a task (found when awaited)."""
        try:
            return self.owner()
        except RuntimeError:
            return None

    async def native_backend(self) -> bool:
        """See :meth:`dlock_client.Client.native_backend`."""
        return await self._run(self._core.is_native())

    async def waiters(self, name: str, count: int | None = None) -> list[Waiter]:
        return await self._run(self._core.waiters(name, count))

    async def info(self, name: str) -> LockInfo:
        return await self._run(self._core.info(name))

    async def aclose(self) -> None:
        """Stops the watchdog and closes every connection of the client, within one response
        time-out: calls in flight raise :class:`~dlock_client.ClientClosedError` (a waiting
        acquire leaves nothing queued), holds not released are lost (``reason == "closed"``)
        and freed by the server when their lease ends, or after the bind grace where the
        module has BIND. Every later call raises ``ClientClosedError``; closing again does
        nothing."""
        if self._closed:
            return
        self._closed = True
        self._core.close()
        pending = [t for t in [*self._inflight, self._dog] if t is not None]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=self._core.response_timeout)
        for ps in list(self._pubsubs):
            await _quietly(ps.aclose())
        if self._cluster is not None:
            await self._cluster.close()
            return
        await self._waits.aclose()
        await self._cmds.aclose()
        await self._waits.connection_pool.disconnect()
        await self._cmds.connection_pool.disconnect()
        await self._dog_conn.close()
        await self._dog_pool.disconnect()

    close = aclose

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the shell: running flows -----------------------------------------------------

    async def _acquire(self, request: Request, timeout: float | None,
                       owner: str | None) -> Held | None:
        return await self._run(self._core.acquire(
            request, owner if owner is not None else self.owner(), timeout, self._make_held))

    async def _run(self, flow: fx.Flow[T]) -> T:
        """Runs a flow of the core: each request it yields is served by :meth:`_do`. A flow
        that fails because the client closed meanwhile raises ``ClientClosedError``."""
        if self._closed:
            flow.close()
            raise self._closed_error()
        return await adrive(self._driver(flow), self._do)

    async def _do(self, op: fx.Op) -> Any:
        """Where a request reaches a connection (a cluster client routes here by ``op.key``)."""
        if isinstance(op, fx.Unsubscribe):  # also once closed: it closes a connection
            await self._unsubscribe(op.handle)
            return None
        self._check_open()
        # Short commands answer within the response time-out by themselves (and fail at once
        # when aclose disconnects their connection); what waits longer is a task of its own.
        if isinstance(op, fx.Call):
            if op.role is fx.Role.WAIT or op.cleanup:
                return await self._io(self._call(op), op.reply_within, op.cleanup)
            return await self._call(op)
        if self._cluster is not None and isinstance(op, (fx.Pipe, fx.Refresh)):
            return await self._cluster.do(op)
        if isinstance(op, fx.Refresh):
            return None
        if isinstance(op, fx.Pipe):
            return await self._dog_conn.pipe([list(c) for c in op.commands])
        if isinstance(op, fx.Subscribe):
            # On a cluster, on the node serving the key (a PUBLISH reaches every node).
            waits = (self._waits if self._cluster is None
                     else await self._cluster.waits_for(op.key))
            ps = waits.pubsub()
            self._pubsubs.add(ps)
            try:
                await self._io(ps.subscribe(op.channel))
            except BaseException:
                await self._unsubscribe(ps)
                raise
            return ps
        if isinstance(op, fx.Listen):
            return await self._io(op.handle.get_message(timeout=op.timeout))
        if isinstance(op, fx.Sleep):
            return await self._io(asyncio.sleep(op.seconds), cleanup=op.cleanup)
        raise TypeError(op)

    async def _unsubscribe(self, ps: Any) -> None:
        self._pubsubs.discard(ps)
        await _uninterrupted(ps.aclose())

    def _call(self, op: fx.Call) -> Awaitable[Any]:
        if self._cluster is not None:
            return self._cluster.do(op)
        conn = self._waits if op.role is fx.Role.WAIT else self._cmds
        sent: Awaitable[Any] = conn.execute_command(*op.args)
        return sent

    async def _io(self, aw: Awaitable[Any], within: float | None = None,
                  cleanup: bool = False) -> Any:
        """Awaits one request's I/O that may wait long (a WAIT, a subscription, a sleep) as a
        task :meth:`aclose` can cancel; at most `within`
        seconds (then redis-py's ``TimeoutError``: redis-py closed the connection, which
        drops a waiter). A clean-up is not interrupted by a second cancellation."""
        task = asyncio.ensure_future(aw)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        try:
            if cleanup:
                return await _uninterrupted(task)
            if within is None:
                return await task
            try:
                return await asyncio.wait_for(task, within)
            except asyncio.TimeoutError:
                raise rexc.TimeoutError(
                    f"no reply from {self.server} within {within:.3f} s") from None
        except asyncio.CancelledError:
            if self._closed and task.cancelled() and not _cancelling():
                raise self._closed_error() from None
            raise

    # -- the watchdog -----------------------------------------------------------------

    def _start_watchdog(self, wake: bool) -> None:
        if wake:
            self._dog_wake.set()
        if not self._closed and (self._dog is None or self._dog.done()):
            # Its own context: the watchdog is no owner's task.
            self._dog = contextvars.Context().run(
                asyncio.get_running_loop().create_task, self._watch())

    async def _watch(self) -> None:
        dog = self._core.watchdog
        while True:
            try:
                await asyncio.wait_for(self._dog_wake.wait(), timeout=dog.doze())
            except asyncio.TimeoutError:
                pass
            self._dog_wake.clear()
            await self._run(dog.round())


def _cancelling() -> bool:
    """Whether the current task itself is being cancelled (not only what it awaited)."""
    task = asyncio.current_task()
    return task is not None and bool(getattr(task, "cancelling", lambda: 0)())


async def _quietly(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception:
        pass


async def _uninterrupted(aw: Any) -> Any:
    """Awaits `aw` to its end even when the caller is cancelled meanwhile (a clean-up after a
    cut-short acquire must not be cut short by a second cancellation)."""
    task = asyncio.ensure_future(aw)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise
