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

Owners are per task: two tasks exclude each other, a task re-entering its own lock counts up.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
import weakref
from typing import Any, Awaitable, Callable, List, Optional, TypeVar

import redis.asyncio as aredis
import redis.exceptions as rexc
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ._holds import Entry
from ._common import ClientBase, HeldBase, ReadWriteLockBase
from ._pools import open_pools
from ._protocol import (
    BindSupport,
    LockInfo,
    Request,
    Waiter,
    check_options,
    first_unknown_option,
    give_back_command,
    parse_info,
    parse_waiters,
    renew_command,
    translate,
    wait_ms,
    waiters_command,
)

__all__ = ["Acquirable", "Client", "Held", "Lock", "ReadWriteLock", "Semaphore"]

T = TypeVar("T")

_task_numbers = itertools.count(1)


class Held(HeldBase):
    """A hold the server granted; ``lost`` is an :class:`asyncio.Event`. See
    :class:`dlock_client.Held`."""

    def __init__(self, client: "Client", request: Request, owner: str, count: int,
                 token: Optional[int]) -> None:
        super().__init__(request, owner, count, token)
        self._client = client
        self.lost = asyncio.Event()

    def _lost_now(self) -> bool:
        return self.lost.is_set()

    async def release(self) -> bool:
        """True when this released the owner's last hold; False when it still holds the key
        or held nothing any more (lost). Idempotent."""
        if self._released:
            return False
        self._released = True
        self._client._registry.remove(self)
        return bool(await self._client._call(self._request.release_command(self.owner)) == 1)

    async def __aenter__(self) -> "Held":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


class Acquirable:
    def __init__(self, client: "Client", request: Request) -> None:
        self._client = client
        self._request = request
        self._entered: "weakref.WeakKeyDictionary[asyncio.Task[Any], List[Held]]" = (
            weakref.WeakKeyDictionary())

    @property
    def name(self) -> str:
        return self._request.key

    async def acquire(self, timeout: Optional[float] = None) -> Optional[Held]:
        """Wait in the server's FIFO queue: without limit (None), not at all (0), or up to
        `timeout` seconds. The hold, or None when the time ran out. Cancelling the call
        leaves nothing held and nothing queued."""
        return await self._client._acquire(self._request, timeout)

    async def __aenter__(self) -> Held:
        held = await self.acquire(None)
        assert held is not None
        self._stack().append(held)
        return held

    async def __aexit__(self, *exc: object) -> None:
        await self._stack().pop().release()

    def _stack(self) -> List[Held]:
        task = asyncio.current_task()
        assert task is not None
        return self._entered.setdefault(task, [])


class Lock(Acquirable):
    """An exclusive lock, reentrant per task."""


class ReadWriteLock(ReadWriteLockBase[Acquirable]):
    _side = Acquirable


class Semaphore(Acquirable):
    async def acquire(self, timeout: Optional[float] = None, count: int = 1) -> Optional[Held]:
        return await self._client._acquire(self._request.with_count(count), timeout)


class Client(ClientBase[Lock, ReadWriteLock, Semaphore, Held]):
    """See :class:`dlock_client.Client`; the watchdog is a task of the running loop."""

    _held, _lock, _rwlock, _semaphore = Held, Lock, ReadWriteLock, Semaphore

    def __init__(self, redis_client: "aredis.Redis", *, bind: Optional[float] = 2.0,
                 command_timeout: float = 5.0) -> None:
        super().__init__(
            open_pools(redis_client, aredis.Redis, Retry(NoBackoff(), 0), command_timeout), bind)
        self._dog: Optional["asyncio.Task[None]"] = None
        self._dog_wake = asyncio.Event()
        self._tasks: "weakref.WeakKeyDictionary[asyncio.Task[Any], int]" = (
            weakref.WeakKeyDictionary())

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> "Client":
        return cls(aredis.Redis.from_url(url), **kwargs)

    def owner(self) -> str:
        """This task's owner id: ``<128-bit random id of the client>:task-<n>``."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("dlock_client.asyncio needs a running task")
        n = self._tasks.get(task)
        if n is None:
            n = self._tasks[task] = next(_task_numbers)
        return f"{self._prefix}:task-{n}"

    async def waiters(self, name: str, count: Optional[int] = None) -> List[Waiter]:
        return parse_waiters(await self._call(waiters_command(name, count)))

    async def info(self, name: str) -> LockInfo:
        return parse_info(await self._call(["DLOCK.INFO", name]))

    async def aclose(self) -> None:
        """Stops the watchdog and closes the connections. Holds not released are freed by the
        server when their lease ends, or after the bind grace where the module has BIND."""
        if self._dog is not None:
            self._dog.cancel()
            await asyncio.gather(self._dog, return_exceptions=True)
        await self._waits.aclose()
        await self._cmds.aclose()
        await self._waits.connection_pool.disconnect()
        await self._cmds.connection_pool.disconnect()
        await self._dog_pool.disconnect()

    close = aclose

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _acquire(self, request: Request, timeout: Optional[float]) -> Optional[Held]:
        owner = self.owner()
        wait = wait_ms(timeout)
        conn = self._cmds if wait is None else self._waits
        before = self._registry.held(request.key, owner, request.kind)
        held: Optional[Held] = None
        try:
            granted_at = time.monotonic()
            reply = await self._with_bind(
                lambda bind: conn.execute_command(*request.command(owner, wait, bind)), request,
                self._bind)
            held = self._granted(request, owner, reply, granted_at)
            if held is not None:
                self._start_watchdog(self._watchdog_due(request, granted_at))
            return held
        except BaseException as error:
            if not isinstance(error, rexc.ResponseError):
                # Cancelled or cut off: redis-py closed the waiting connection, so the
                # server drops the waiter; whatever was granted just before goes back. A
                # second cancellation does not interrupt that.
                cleanup = asyncio.ensure_future(self._give_back(request, owner, before, held))
                try:
                    await asyncio.shield(cleanup)
                except asyncio.CancelledError:
                    pass
            raise translate(error, self.server) from None

    async def _with_bind(self, send: Callable[[Optional[int]], Awaitable[T]],
                         request: Optional[Request], support: BindSupport) -> T:
        """Sends with BIND where the module supports it."""
        bind = support.arg()
        try:
            result = await send(bind)
        except rexc.ResponseError as error:
            if not support.retry_without(error, bind):
                check_options(error, request, self.server)
                raise
            bind = None
            try:
                result = await send(None)
            except rexc.ResponseError as error2:
                check_options(error2, request, self.server)
                raise
        support.accepted(bind)
        return result

    async def _give_back(self, request: Request, owner: str, before: int,
                         held: Optional[Held]) -> None:
        if held is not None:
            await held.release()
            return
        try:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and any(
                    w.owner == owner for w in await self.waiters(request.key)):
                await asyncio.sleep(0.002)
            give = give_back_command(await self.info(request.key), owner, request, before)
            if give is not None:
                await self._call(give)
        except Exception:
            pass  # the server is gone too: the lease (or BIND) frees it

    async def _call(self, args: List[Any]) -> Any:
        try:
            return await self._cmds.execute_command(*args)
        except Exception as error:
            raise translate(error, self.server) from None

    def _start_watchdog(self, wake: bool) -> None:
        if wake:
            self._dog_wake.set()
        if self._dog is None or self._dog.done():
            self._dog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        conn = aredis.Redis(connection_pool=self._dog_pool)  # this task alone: one connection
        try:
            while True:
                self._dog_sleeps_until = -math.inf  # an acquire meanwhile wakes it
                now = time.monotonic()
                wake = self._registry.next_wake(now)
                self._dog_sleeps_until = math.inf if wake is None else now + wake
                try:
                    await asyncio.wait_for(self._dog_wake.wait(), timeout=wake)
                except asyncio.TimeoutError:
                    pass
                self._dog_wake.clear()
                await self._renew_due(conn)
        finally:
            await conn.aclose()

    async def _renew_due(self, conn: "aredis.Redis") -> None:
        now = time.monotonic()
        for hold in self._registry.expired(now):
            hold.lost.set()
        due = self._registry.due(now)
        if not due:
            return
        sent_at = time.monotonic()
        try:
            replies = await self._renew_pipeline(conn, due)
        except (rexc.RedisError, OSError):  # not reached (or the module went away)
            self._registry.all_unreachable(due, time.monotonic())
            return
        for hold in self._registry.apply(due, replies, sent_at):
            hold.lost.set()

    async def _renew_pipeline(self, conn: "aredis.Redis", due: List[Entry[Held]]) -> List[Any]:
        async def send(bind: Optional[int]) -> List[Any]:
            pipe = conn.pipeline(transaction=False)
            for e in due:
                pipe.execute_command(*renew_command(e.key, e.owner, e.lease_ms, bind))
            replies: List[Any] = await pipe.execute(raise_on_error=False)
            unknown = first_unknown_option(replies)
            if unknown is not None and bind is not None:
                raise unknown
            return replies
        return await self._with_bind(send, None, self._bind_renew)
