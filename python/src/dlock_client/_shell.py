"""What the two shells (the sync API, ``_sync.py``, and the asyncio API, ``asyncio.py``)
share, apart from I/O (sync calls or awaited ones) and the kind of their events: the public
objects' bases (a hold's fields, a lock's and a read-write lock's sides, the client's state,
connections and factories), the flows ``with`` blocks run, and the watchdog connection's
pipeline. The logic itself is in :mod:`._client`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

import redis.exceptions as rexc
from redis.backoff import NoBackoff

from ._client import DEFAULT_RESPONSE_TIMEOUT, Backend, ClientCore, check_client, not_held
from ._drive import Driver
from ._effects import Flow, Replies, Role
from ._holds import LostBase
from ._pools import open_pools
from ._protocol import (
    MODULE_BIND_MS,
    Kind,
    Request,
    check_timeout,
    lock_request,
    rwlock_request,
    semaphore_request,
)
from .errors import AcquireTimeoutError, ClientClosedError, NotHeldError

T = TypeVar("T")
E = TypeVar("E")
A = TypeVar("A")
L = TypeVar("L")
RW = TypeVar("RW")
S = TypeVar("S")
H = TypeVar("H", bound="HeldBase")
R = TypeVar("R")  # the shell's redis-py client (or cluster client) a Client is made over
C = TypeVar("C")  # the shell's cluster topology
D = TypeVar("D")  # the shell's watchdog connection
CB = TypeVar("CB", bound="ClientBase[Any, Any, Any, Any, Any, Any, Any]")


class ScopedBase(Generic[E]):
    """What ``with`` runs on entering and leaving (each shell's ``_Scoped`` runs the flows)."""

    def _enter_flow(self) -> Flow[E]:
        raise NotImplementedError

    def _exit_flow(self) -> Flow[Any]:
        raise NotImplementedError


class HeldBase:
    """``token``: the fencing token (with ``fence=True``); ``count``: the hold count (or the
    permits this acquire took, for a semaphore); ``owner``: who holds it on the server;
    ``lost``: whether it is lost, read against the clock when asked (see the subclasses)."""

    lost: LostBase
    _lost: Callable[[], LostBase]  # the shell's kind of ``lost``

    def __init__(self, client: Any, request: Request, owner: str, count: int,
                 token: int | None) -> None:
        self._client = client
        self.lost = self._lost()
        self._request = request
        self.key = request.key
        self.kind: Kind = request.kind
        self.owner = owner
        self.count = request.count if request.kind == "semaphore" else count
        self.token = token
        self._released = False

    @property
    def released(self) -> bool:
        """Whether this hold was released (by :meth:`release` or leaving its ``with``)."""
        return self._released

    def _not_held(self, server: str) -> NotHeldError:
        return not_held(self, server)

    def _exit_flow(self) -> Flow[Any]:
        """Leaving ``with held:``: the release."""
        flow: Flow[Any] = self._client._core.release(self)
        return flow

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.kind} {self.key!r} owner={self.owner!r} "
                f"count={self.count} token={self.token} lost={self.lost.is_set()} "
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


class ClientBase(Generic[L, RW, S, H, R, C, D]):
    """The state of a client and what it hands out; subclasses do the I/O.

    ``bind``: the grace in seconds after which the server frees a hold whose process died
    (its connections closed); None keeps only the lease. Sent where the server's module
    supports it, else left out. ``response_timeout`` (seconds, default 5, as the Rust
    client): how long the server may take to answer; a call it does not answer in time raises
    :class:`~dlock_client.ResponseTimeoutError` (a wait: its time-out plus this).
    ``backend``: ``"auto"`` (the dlock module where the server has it, else Redisson's Lua
    scripts), ``"native"`` or ``"script"``. Bad values raise
    :class:`~dlock_client.ConfigError` before anything is opened.
    """

    _held: Callable[[Any, Request, str, int, int | None], H]
    _lock: Callable[[Any, Request], L]
    _rwlock: Callable[[Any, Request], RW]
    _semaphore: Callable[[Any, Request], S]
    # The shell's I/O classes: redis-py's client, cluster client and retry (sync or asyncio),
    # the shell's cluster topology, its watchdog connection and its kind of event.
    _redis: Any
    _redis_cluster: Any
    _retry: Any
    _cluster_shell: Callable[..., C]
    _dog_connection: Callable[[Any], D]
    _event: Callable[[], Any]

    def __init__(self, redis_client: R, *, bind: float | None = MODULE_BIND_MS / 1000,
                 response_timeout: float = DEFAULT_RESPONSE_TIMEOUT,
                 backend: Backend = "auto", command_timeout: float | None = None) -> None:
        response_timeout = renamed_timeout(response_timeout, command_timeout)
        check_client(bind, response_timeout, backend)  # before anything is opened
        retry = self._retry(NoBackoff(), 0)
        self._cluster: C | None = None
        if isinstance(redis_client, self._redis_cluster):
            cluster: Any = self._cluster_shell(redis_client, retry, response_timeout,
                                               self._dog_connection)
            self._cluster, pools = cluster, cluster.nodes.pools()
        else:
            pools = open_pools(redis_client, self._redis, retry, response_timeout)
        self._core: ClientCore[H] = ClientCore(pools.server, bind, backend, response_timeout)
        self._core.cluster = self._cluster is not None
        self._core.start_watchdog = self._start_watchdog
        self.server, self._waits, self._cmds, self._dog_pool = pools
        self._dog_conn = self._dog_connection(self._dog_pool)
        self._dog_wake = self._event()
        self._closed = False
        self._prefix = self._core.prefix
        self._registry = self._core.registry
        self._pubsubs: set[Any] = set()  # open subscriptions (closing ends them)
        self._open_shell()

    @classmethod
    def from_url(cls: type[CB], url: str, **kwargs: Any) -> CB:
        """``Client.from_url("redis://127.0.0.1:6379/0")``; keyword arguments go to Client."""
        return cls(cls._redis.from_url(url), **kwargs)

    def _open_shell(self) -> None:
        """The shell's own state (its watchdog, the I/O in flight), made last by
        ``__init__``."""
        raise NotImplementedError

    @property
    def native(self) -> bool | None:
        """True when the dlock module serves this client, False for the script backend, None
        until the first command with ``backend="auto"`` found out."""
        return self._core.native

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: every call then raises
        :class:`~dlock_client.ClientClosedError`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> ClientClosedError:
        return ClientClosedError(f"the dlock client of {self.server} is closed", self.server)

    def _start_watchdog(self, wake: bool) -> None:
        """Starts the shell's watchdog (a thread, a task) where it does not run; wakes it
        where `wake`."""
        raise NotImplementedError

    def _make_held(self, request: Request, owner: str, count: int, token: int | None) -> H:
        """A hold object of the shell's kind, for the core."""
        return self._held(self, request, owner, count, token)

    def _driver(self, flow: Flow[T]) -> Driver[T]:
        return Driver(flow, self)

    def lock(self, name: str, *, lease: float = 30.0, fence: bool = False,
             lock_delay: float | None = None) -> L:
        """An exclusive lock, reentrant per owner. `lease` in seconds (the watchdog renews);
        `fence`: grants carry a fencing token; `lock_delay` (seconds, at most 60): after a
        hold ends without a release, nobody gets the lock for that long. Bad values raise
        :class:`~dlock_client.ConfigError` here."""
        self._check_open()
        return self._lock(self, lock_request(name, lease, fence, lock_delay))

    def rwlock(self, name: str, *, lease: float = 30.0, fence: bool = False,
               lock_delay: float | None = None) -> RW:
        """A read-write lock; `lock_delay` applies to the write side, as on the server."""
        self._check_open()
        return self._rwlock(self, rwlock_request(name, lease, fence, lock_delay))

    def semaphore(self, name: str, capacity: int | None = None, *,
                  lease: float = 30.0) -> S:
        """`capacity` permits, each holder with its own lease (required: a semaphore made
        without it raises :class:`~dlock_client.ConfigError`)."""
        self._check_open()
        return self._semaphore(self, semaphore_request(name, capacity, lease))


class AcquirableBase:
    """A lock, a mode of a read-write lock, or a semaphore: its client and request."""

    # The shell's store of each owner's entered holds (per thread, per task), made per object.
    _entered_store: Callable[[], Any]

    def __init__(self, client: Any, request: Request) -> None:
        self._client = client
        self._request = request
        self._entered = self._entered_store()

    @property
    def name(self) -> str:
        return self._request.key

    def _stack(self) -> list[Any]:
        """The holds the calling owner (thread, task) took by entering ``with lock:``."""
        raise NotImplementedError

    def _enter_flow(self) -> Flow[Any]:
        """Entering ``with lock:``: the acquire, without limit."""
        client = self._client
        held = yield from client._core.acquire(self._request, client.owner(), None,
                                               client._make_held)
        self._stack().append(held)
        return held

    def _exit_flow(self) -> Flow[Any]:
        """Leaving ``with lock:``: the release of the hold its entering took."""
        flow: Flow[Any] = self._client._core.release(self._stack().pop())
        return flow


class BoundedBase:
    """``with lock(timeout=...)``: the acquire it stands for (the shells enter and exit)."""

    _held: Any = None

    def __init__(self, acquirable: AcquirableBase, timeout: float | None, count: int) -> None:
        self._client = acquirable._client
        self._name = acquirable.name
        self._request = acquirable._request.with_count(count)
        self._timeout = check_timeout(timeout)

    def _enter_flow(self) -> Flow[Any]:
        """Entering: the acquire; not granted in time: :class:`AcquireTimeoutError`."""
        client = self._client
        held = yield from client._core.acquire(self._request, client.owner(), self._timeout,
                                               client._make_held)
        if held is None:
            raise AcquireTimeoutError(f"{self._name!r} not granted within {self._timeout} s",
                                      client.server)
        self._held = held
        return held

    def _exit_flow(self) -> Flow[None]:
        """Leaving: the release of what entering got."""
        if self._held is not None:
            yield from self._client._core.release(self._held)


class DogConnectionBase:
    """The watchdog's one connection (renewals bind holds to it), shared with ``renew()`` and
    a waited grant's confirmation under the shell's lock. Its link changes when it
    reconnects (a connect callback counts the connections)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._conn: Any = None
        self._epoch = 0

    def _connected(self, _conn: Any) -> None:
        self._epoch += 1

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self._pool.make_connection()
            self._conn.register_connect_callback(self._connected)
        return self._conn

    def _exchange(self, commands: list[list[Any]]
                  ) -> Generator[Callable[[], Any], Any, Replies]:
        """One pipeline on the connection, as steps the shell runs (calls, awaited in
        asyncio; see :class:`Driver`): error replies are values, a connection error closes
        the connection and is raised."""
        conn = self._connection()
        try:
            yield lambda: conn.send_packed_command(conn.pack_commands(commands))
            values: list[Any] = []
            for _ in commands:
                try:
                    values.append((yield conn.read_response))
                except rexc.ResponseError as error:
                    values.append(error)
        except BaseException:
            yield conn.disconnect
            raise
        return Replies(values, (Role.DOG, self._epoch))


def renamed_timeout(response_timeout: float, command_timeout: float | None) -> float:
    """``command_timeout=``, the former name of ``response_timeout=``, still taken."""
    if command_timeout is None:
        return response_timeout
    warnings.warn("command_timeout= is now response_timeout=", DeprecationWarning, stacklevel=3)
    return command_timeout

