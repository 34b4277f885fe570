"""The synchronous API: a Client, its locks, and the watchdog thread."""

from __future__ import annotations

import itertools
import math
import threading
import time
from typing import Any, Callable, List, Optional, TypeVar

import redis
import redis.exceptions as rexc
from redis.backoff import NoBackoff
from redis.retry import Retry

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

T = TypeVar("T")

_thread_numbers = threading.local()
_next_number = itertools.count(1)


class Held(HeldBase):
    """A hold the server granted: released with :meth:`release` or by leaving a ``with``.
    ``lost`` is a :class:`threading.Event`, set when the watchdog learns that the hold is gone
    (the server says so, or could not be reached before the lease ended)."""

    def __init__(self, client: "Client", request: Request, owner: str, count: int,
                 token: Optional[int]) -> None:
        super().__init__(request, owner, count, token)
        self._client = client
        self.lost = threading.Event()

    def _lost_now(self) -> bool:
        return self.lost.is_set()

    def release(self) -> bool:
        """True when this released the owner's last hold (or these permits were its last);
        False when it still holds the key, or held nothing any more (lost). Idempotent."""
        if self._released:
            return False
        self._released = True
        self._client._registry.remove(self)
        return bool(self._client._call(self._request.release_command(self.owner)) == 1)

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Acquirable:
    """Something that can be acquired: a lock, a mode of a read-write lock."""

    def __init__(self, client: "Client", request: Request) -> None:
        self._client = client
        self._request = request
        self._entered = threading.local()

    @property
    def name(self) -> str:
        return self._request.key

    def acquire(self, timeout: Optional[float] = None) -> Optional[Held]:
        """Wait in the server's FIFO queue: without limit (None), not at all (0), or up to
        `timeout` seconds. The hold, or None when the time ran out."""
        return self._client._acquire(self._request, timeout)

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


class Client(ClientBase[Lock, ReadWriteLock, Semaphore, Held]):
    """A dlock client over a redis-py client, which says where the server is (``bind``: the
    grace in seconds for a crashed process's holds; ``command_timeout``: the read time-out of
    short commands; both explained in ``dlock_client._common.ClientBase``)."""

    _held, _lock, _rwlock, _semaphore = Held, Lock, ReadWriteLock, Semaphore

    def __init__(self, redis_client: "redis.Redis", *, bind: Optional[float] = 2.0,
                 command_timeout: float = 5.0) -> None:
        super().__init__(
            open_pools(redis_client, redis.Redis, Retry(NoBackoff(), 0), command_timeout), bind)
        self._dog: Optional[threading.Thread] = None
        self._dog_wake = threading.Event()
        self._closed = threading.Event()
        self._dog_lock = threading.Lock()

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

    def waiters(self, name: str, count: Optional[int] = None) -> List[Waiter]:
        """``DLOCK.WAITERS``: who waits on `name`, in FIFO order."""
        return parse_waiters(self._call(waiters_command(name, count)))

    def info(self, name: str) -> LockInfo:
        """``DLOCK.INFO``: kind, holders, waiters, last fencing token."""
        return parse_info(self._call(["DLOCK.INFO", name]))

    def close(self) -> None:
        """Stops the watchdog and closes the connections. Holds not released are freed by the
        server when their lease ends, or after the bind grace where the module has BIND."""
        self._closed.set()
        self._dog_wake.set()
        if self._dog is not None and self._dog is not threading.current_thread():
            self._dog.join()
        self._waits.close()
        self._cmds.close()
        self._waits.connection_pool.disconnect()
        self._cmds.connection_pool.disconnect()
        self._dog_pool.disconnect()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- acquiring --------------------------------------------------------------------

    def _acquire(self, request: Request, timeout: Optional[float]) -> Optional[Held]:
        owner = self.owner()
        wait = wait_ms(timeout)
        conn = self._cmds if wait is None else self._waits
        before = self._registry.held(request.key, owner, request.kind)
        held: Optional[Held] = None
        try:
            granted_at = time.monotonic()
            reply = self._with_bind(
                lambda bind: conn.execute_command(*request.command(owner, wait, bind)), request,
                self._bind)
            held = self._granted(request, owner, reply, granted_at)
            if held is not None:
                self._start_watchdog(self._watchdog_due(request, granted_at))
            return held
        except BaseException as error:
            if held is not None:
                held.release()
            elif not isinstance(error, rexc.ResponseError):
                # A wait cut short (KeyboardInterrupt, a lost connection): redis-py closed
                # its connection, so the server drops the waiter; a grant made just before
                # is given back.
                self._give_back(request, owner, before)
            raise translate(error, self.server) from None

    def _with_bind(self, send: Callable[[Optional[int]], T], request: Optional[Request],
                   support: BindSupport) -> T:
        """Sends with BIND where the module supports it."""
        bind = support.arg()
        try:
            result = send(bind)
        except rexc.ResponseError as error:
            if not support.retry_without(error, bind):
                check_options(error, request, self.server)
                raise
            bind = None
            try:
                result = send(None)
            except rexc.ResponseError as error2:
                check_options(error2, request, self.server)
                raise
        support.accepted(bind)
        return result

    def _give_back(self, request: Request, owner: str, before: int) -> None:
        """After a cut-short wait: once the server has dropped the waiter, release whatever
        that request was granted (what the owner holds beyond what it held before)."""
        try:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and any(
                    w.owner == owner for w in self.waiters(request.key)):
                time.sleep(0.002)
            give = give_back_command(self.info(request.key), owner, request, before)
            if give is not None:
                self._call(give)
        except Exception:
            pass  # the server is gone too: the lease (or BIND) frees it

    def _call(self, args: List[Any]) -> Any:
        try:
            return self._cmds.execute_command(*args)
        except Exception as error:
            raise translate(error, self.server) from None

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
        # Its own pool, used by this thread alone: one connection, which RENEW ... BIND binds
        # the holds to (re-bound after a reconnect).
        conn = redis.Redis(connection_pool=self._dog_pool)
        try:
            while not self._closed.is_set():
                self._dog_sleeps_until = -math.inf  # an acquire meanwhile wakes it
                now = time.monotonic()
                wake = self._registry.next_wake(now)
                self._dog_sleeps_until = math.inf if wake is None else now + wake
                self._dog_wake.wait(timeout=wake)
                self._dog_wake.clear()
                if self._closed.is_set():
                    break
                self._renew_due(conn)
        finally:
            conn.close()

    def _renew_due(self, conn: "redis.Redis") -> None:
        now = time.monotonic()
        for hold in self._registry.expired(now):
            hold.lost.set()
        due = self._registry.due(now)
        if not due:
            return
        sent_at = time.monotonic()
        try:
            replies = self._renew_pipeline(conn, due)
        except (rexc.RedisError, OSError):  # not reached (or the module went away)
            self._registry.all_unreachable(due, time.monotonic())
            return
        for hold in self._registry.apply(due, replies, sent_at):
            hold.lost.set()

    def _renew_pipeline(self, conn: "redis.Redis", due: List[Entry[Held]]) -> List[Any]:
        """One pipeline of RENEW ... BIND (re-binding the holds to this connection)."""
        def send(bind: Optional[int]) -> List[Any]:
            pipe = conn.pipeline(transaction=False)
            for e in due:
                pipe.execute_command(*renew_command(e.key, e.owner, e.lease_ms, bind))
            replies = pipe.execute(raise_on_error=False)
            unknown = first_unknown_option(replies)
            if unknown is not None and bind is not None:
                raise unknown
            return replies
        return self._with_bind(send, None, self._bind_renew)

