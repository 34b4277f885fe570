"""The package's connections to a Redis Cluster's nodes, derived from the caller's redis-py
cluster client (sync or asyncio), and the shells' requests served on them.

- short commands (releases, INFO, WAITERS, acquires without wait) go on a RedisCluster of the
  package's own (``cmds``): redis-py routes each by its key (the module declares the key's
  position in ``COMMAND``) and follows MOVED/ASK/TRYAGAIN; read time-out ``response_timeout``,
  no re-send after a lost connection;
- waits go on a dedicated connection to the key's master (a pool per node, no read time-out),
  found in ``cmds``' slot map, or to the node a redirect named (the core follows redirects
  within the wait's one deadline: ``_backend.Native._acquire_call``);
- the watchdog has a connection of its own per node (read time-out at most 1 s): renewals
  are pipelined per node, and RENEW ... BIND binds a node's holds to that node's connection
  (a link per node); the PING goes to every node's.

:class:`ClusterShell` and :class:`AsyncClusterShell` serve the core's requests so (the
shells hand them ``Call``, ``Pipe`` and ``Refresh`` on a cluster; the script backend's
subscriptions go to the key's node, :meth:`ClusterShell.waits_for`).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions as rexc

from ._drive import Steps, arun_steps, run_steps
from ._effects import Call, Pipe, Refresh, Replies, Role
from ._pools import Pools, no_maintenance_notifications
from ._redirect import Later, redirect_of
from ._waiting import Interrupt, wait_call

# Settings of the caller's client that the package's connections keep. Not carried: those the
# package sets (time-outs, retries, decoding) and those that would route elsewhere (replicas).
_NOT_CARRIED = frozenset({
    "host", "port", "startup_nodes", "retry", "retry_on_error", "retry_on_timeout",
    "socket_timeout", "decode_responses", "connection_pool", "redis_connect_func", "db",
    "path", "read_from_replicas", "load_balancing_strategy", "response_callbacks", "cache",
    "cache_config", "connection_pool_class", "nodes_flag", "url",
})


def _seeds(rc: Any) -> list[tuple[str, int]]:
    """The nodes the caller's client knows (or was given to start from)."""
    nodes: dict[str, Any] = {}
    manager = rc.nodes_manager
    for source in (getattr(manager, "nodes_cache", {}), getattr(manager, "startup_nodes", {})):
        nodes.update(source)
    return [(n.host, int(n.port)) for n in nodes.values()]


def cluster_name(rc: Any) -> str:
    """How errors name a cluster: ``cluster`` and (up to three of) the nodes it knows."""
    return "cluster " + ",".join(f"{h}:{p}" for h, p in sorted(_seeds(rc))[:3])


def _caller_settings(rc: Any) -> tuple[dict[str, Any], Any]:
    """The caller's connection keyword arguments and connection class."""
    if isinstance(rc, redis.cluster.RedisCluster):
        node = rc.get_default_node() or next(iter(rc.get_nodes()), None)
        if node is not None and node.redis_connection is not None:
            pool = node.redis_connection.connection_pool
            return dict(pool.connection_kwargs), pool.connection_class
    kwargs = dict(rc.get_connection_kwargs())
    return kwargs, kwargs.get("connection_class")


def derive_cluster(rc: Any, socket_timeout: float | None, retry: Any) -> Any:
    """A cluster client of the same kind (sync or asyncio) as `rc`, seeded with the nodes it
    knows and keeping its settings (credentials, TLS, address remapping), with the package's
    time-out and retry, replies decoded as text."""
    sync = isinstance(rc, redis.cluster.RedisCluster)
    cls: Any = redis.cluster.RedisCluster if sync else redis.asyncio.cluster.RedisCluster
    node_cls: Any = redis.cluster.ClusterNode if sync else redis.asyncio.cluster.ClusterNode
    kwargs, connection_class = _caller_settings(rc)
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    allowed = set(getattr(redis.cluster, "REDIS_ALLOWED_KEYS", ())) if takes_any else set(params)
    settings = {k: v for k, v in kwargs.items() if k in allowed and k not in _NOT_CARRIED}
    if connection_class is not None and "SSL" in connection_class.__name__:
        settings["ssl"] = True
    if not takes_any:
        settings.pop("connection_class", None)
    remap = getattr(rc.nodes_manager, "address_remap", None)
    if remap is not None:
        settings["address_remap"] = remap
    no_maintenance_notifications(settings)
    if _redis_version() < (5, 3):  # before 5.3 these retries were not the `retry`'s
        settings["cluster_error_retry_attempts"] = 0
    seeds = [node_cls(host, port) for host, port in _seeds(rc)]
    return cls(startup_nodes=seeds, socket_timeout=socket_timeout, retry=retry,
               decode_responses=True, **settings)


def _redis_version() -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in redis.__version__.split(".")[:2])
    except ValueError:
        return (99,)


class _NodeClients:
    """Something per node address (``host:port``), made by `make` (given the host and port)
    the first time it is asked for: plain clients made from a template's keyword arguments
    with the address replaced, a shell's watchdog connections."""

    def __init__(self, make: Callable[[str, int], Any]) -> None:
        self._make = make
        self.clients: dict[str, Any] = {}
        self._lock = threading.Lock()  # callers' threads (never held across an await)

    def get(self, addr: str) -> Any:
        with self._lock:
            client = self.clients.get(addr)
            if client is None:
                host, port = addr.rsplit(":", 1)
                client = self.clients[addr] = self._make(host, int(port))
            return client


def _node_kwargs(kwargs: dict[str, Any], retry: Any, socket_timeout: float | None,
                 host: str, port: int) -> dict[str, Any]:
    out = {k: v for k, v in kwargs.items()
           if k not in ("connection_pool", "redis_connect_func", "retry_on_timeout",
                        "retry_on_error")}
    out.update(host=host, port=port, retry=retry, socket_timeout=socket_timeout,
               socket_keepalive=True, decode_responses=True)
    no_maintenance_notifications(out)
    return out


class _NodesBase:
    """``cmds`` (a cluster client of the package's own, for routing) and the cluster's name."""

    def __init__(self, rc: Any, retry: Any, response_timeout: float) -> None:
        self.cmds: Any = derive_cluster(rc, response_timeout, retry)
        self.name = cluster_name(rc)

    def pools(self) -> Pools:
        """What a client's base keeps: the name, and ``cmds`` for its short commands."""
        return Pools(self.name, None, self.cmds, None)

    def addr_for(self, key: str) -> str:
        """The master serving `key`'s slot, as the cached slot map says."""
        node = self.cmds.get_node_from_key(key)
        if node is None:
            raise rexc.SlotNotCoveredError(f"the slot of {key!r} is not covered by the cluster")
        return str(node.name)


class Nodes(_NodesBase):
    """A sync cluster: ``cmds``, and per node the waits' and the watchdog's pools."""

    def __init__(self, rc: redis.cluster.RedisCluster, retry: Any, response_timeout: float,
                 dog_timeout: float) -> None:
        super().__init__(rc, retry, response_timeout)
        pool = self._template()
        kwargs, connection_class = dict(pool.connection_kwargs), pool.connection_class

        def maker(timeout: float | None) -> Callable[[str, int], Any]:
            return lambda host, port: redis.Redis(connection_pool=redis.ConnectionPool(
                connection_class=connection_class,
                **_node_kwargs(kwargs, retry, timeout, host, port)))
        self.waits = _NodeClients(maker(None))
        self.dogs = _NodeClients(maker(dog_timeout))

    def _template(self) -> Any:
        node = self.cmds.get_default_node()
        return self.cmds.get_redis_connection(node).connection_pool

    def addr_for(self, key: str) -> str:
        """The master serving `key`'s slot (a slot not covered: the map read again first)."""
        try:
            return super().addr_for(key)
        except rexc.SlotNotCoveredError:
            self.refresh()
            return super().addr_for(key)

    def refresh(self) -> None:
        """Reads the slot map again (after a MOVED)."""
        self.cmds.nodes_manager.initialize()

    def close(self) -> None:
        for clients in (self.waits, self.dogs):
            for c in clients.clients.values():
                c.close()
                c.connection_pool.disconnect()
        self.cmds.close()


class AsyncNodes(_NodesBase):
    """The same for an asyncio cluster; :meth:`ready` before first use (the cluster client
    reads its slot map then)."""

    def __init__(self, rc: redis.asyncio.cluster.RedisCluster, retry: Any,
                 response_timeout: float, dog_timeout: float) -> None:
        super().__init__(rc, retry, response_timeout)
        self._retry = retry
        self._dog_timeout = dog_timeout
        self._ready = False
        self.waits = _NodeClients(self._maker(None))
        self.dogs = _NodeClients(self._maker(dog_timeout))

    def _maker(self, timeout: float | None) -> Callable[[str, int], Any]:
        def make(host: str, port: int) -> Any:
            node = self.cmds.get_default_node()
            return redis.asyncio.Redis(connection_pool=redis.asyncio.ConnectionPool(
                connection_class=node.connection_class,
                **_node_kwargs(node.connection_kwargs, self._retry, timeout, host, port)))
        return make

    async def ready(self) -> None:
        if not self._ready:
            await self.cmds.initialize()
            self._ready = True

    async def addr_of(self, key: str) -> str:
        """:meth:`addr_for` (a slot not covered: the map read again first)."""
        await self.ready()
        try:
            return self.addr_for(key)
        except rexc.SlotNotCoveredError:
            await self.refresh()
            return self.addr_for(key)

    async def refresh(self) -> None:
        await self.cmds.nodes_manager.initialize()

    async def close(self) -> None:
        for clients in (self.waits, self.dogs):
            for c in clients.clients.values():
                await c.aclose() if hasattr(c, "aclose") else await c.close()
                await c.connection_pool.disconnect()
        await (self.cmds.aclose() if hasattr(self.cmds, "aclose") else self.cmds.close())


def _asked(client: Any, args: Sequence[Any]) -> Any:
    """A pipeline of ``ASKING`` and `args` on one connection (ASKING is for the next command)."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("ASKING")
    pipe.execute_command(*args)
    return pipe


def _later(error: BaseException) -> bool:
    """A TRYAGAIN/CLUSTERDOWN, or the UNBLOCKED of a demoted master, which closes the
    connection it answered on: the node's idle wait connections are dropped, so that the
    next try opens a fresh one (a grant bound to one of them is re-bound by the watchdog
    within half the grace, as after any closed wait connection)."""
    return isinstance(redirect_of(error), Later)


def _reply(replies: list[Any]) -> Any:
    """The command's reply after ASKING's; an error reply raised as it came."""
    reply = replies[-1]
    if isinstance(reply, Exception):
        raise reply
    return reply


class _Routing:
    """What the sync and asyncio shells of a cluster share: which node serves which command of
    a watchdog pipeline, and the replies put back in order with the link of each."""

    @staticmethod
    def groups(op: Pipe, addr_for: Callable[[str], str],
               dog_nodes: Iterable[str]) -> dict[str, list[int]]:
        """Indexes of `op`'s commands per node: by key, all to `op.node`, and a command
        without key (the PING) to every node with a watchdog connection."""
        if op.node is not None:
            return {op.node: list(range(len(op.commands)))}
        groups: dict[str, list[int]] = {}
        keyless = [i for i, k in enumerate(op.keys) if k is None]
        for i, key in enumerate(op.keys):
            if key is not None:
                groups.setdefault(addr_for(key), []).append(i)
        for addr in dog_nodes:
            groups.setdefault(addr, []).extend(keyless)
        return groups

    @staticmethod
    def commands(op: Pipe, indexes: list[int]) -> list[list[Any]]:
        cmds = [list(op.commands[i]) for i in indexes]
        return [["ASKING"]] + cmds if op.asking else cmds

    @staticmethod
    def put(out: _Out, addr: str, indexes: list[int], got: Any) -> None:
        """A node's replies (or the connection error that stopped them) into `out`."""
        if isinstance(got, BaseException):
            for i in indexes:
                if out.values[i] is None:
                    out.values[i] = got
            return
        link = (Role.DOG, addr, got.link[-1])
        out.answered.append(link)
        values = got.values[1:] if len(got.values) > len(indexes) else got.values  # ASKING's
        for i, value in zip(indexes, values, strict=False):
            out.values[i], out.links[i] = value, link


class _Out:
    def __init__(self, n: int) -> None:
        self.values: list[Any] = [None] * n
        self.links: list[Any] = [None] * n
        self.answered: list[Any] = []

    def replies(self) -> Replies:
        return Replies(self.values, None, self.links, self.answered)


#: What a node's watchdog connection fails with, answered as its commands' values.
_UNREACHED = (rexc.ConnectionError, rexc.TimeoutError, OSError)


def _fan_out(op: Pipe, groups: dict[str, list[int]], dog_of: Callable[[str], Any]
             ) -> Steps[Replies]:
    """A watchdog pipeline: each node its commands on that node's watchdog connection (made
    by `dog_of`); a node not reached answers its commands with the connection error."""
    out = _Out(len(op.commands))
    for addr, indexes in groups.items():
        try:
            got = yield partial(dog_of(addr).pipe, _Routing.commands(op, indexes))
        except _UNREACHED as error:
            got = error
        _Routing.put(out, addr, indexes, got)
    return out.replies()


def _wait_on(client: Any, op: Call, wait: Callable[[], Any]) -> Steps[Any]:
    """A WAIT on a node's wait connection (`client`), sent by the shell's `wait` (after
    ``ASKING`` for an ASK)."""
    try:
        if op.asking:
            return _reply((yield partial(_asked(client, op.args).execute,
                                         raise_on_error=False)))
        return (yield wait)
    except rexc.ResponseError as error:
        if _later(error):  # tried again on a fresh connection
            yield partial(client.connection_pool.disconnect, inuse_connections=False)
        raise


class _ShellBase:
    """The nodes, and per node the watchdog connection `dog` makes from the node's pool."""

    nodes: Nodes | AsyncNodes

    def __init__(self, dog: Callable[[Any], Any]) -> None:
        self._dogs = _NodeClients(
            lambda host, port: dog(self.nodes.dogs.get(f"{host}:{port}").connection_pool))
        self._dog_of = self._dogs.get


class ClusterShell(_ShellBase):
    """Serves a sync client's requests on a cluster (see the module's docstring); `dog` makes
    the shell's watchdog connection (one per node) from a node's pool."""

    nodes: Nodes

    def __init__(self, rc: redis.cluster.RedisCluster, retry: Any, response_timeout: float,
                 dog: Callable[[Any], Any]) -> None:
        super().__init__(dog)
        self.nodes = Nodes(rc, retry, response_timeout, min(response_timeout, 1.0))

    def do(self, op: Any, interrupt: Interrupt) -> Any:
        """`interrupt`: what ends a wait early (a cancel, the client closing)."""
        if isinstance(op, Call):
            if op.role is not Role.WAIT:
                return self.nodes.cmds.execute_command(*op.args)  # routed by its key
            client = self.nodes.waits.get(op.node or self.nodes.addr_for(str(op.key)))
            return run_steps(_wait_on(client, op, partial(wait_call, client, op.args,
                                                          op.reply_within, interrupt)))
        if isinstance(op, Pipe):
            groups = _Routing.groups(op, self.nodes.addr_for, list(self._dogs.clients))
            return run_steps(_fan_out(op, groups, self._dog_of))
        if isinstance(op, Refresh):
            return self.nodes.refresh()
        raise TypeError(op)

    def waits_for(self, key: str) -> Any:
        """The waits' client of the node serving `key` (the script backend's subscriptions)."""
        return self.nodes.waits.get(self.nodes.addr_for(key))

    def close(self) -> None:
        for dog in list(self._dogs.clients.values()):
            dog.close()
        self.nodes.close()


class AsyncClusterShell(_ShellBase):
    """:class:`ClusterShell` for asyncio."""

    nodes: AsyncNodes

    def __init__(self, rc: redis.asyncio.cluster.RedisCluster, retry: Any,
                 response_timeout: float, dog: Callable[[Any], Any]) -> None:
        super().__init__(dog)
        self.nodes = AsyncNodes(rc, retry, response_timeout, min(response_timeout, 1.0))

    async def do(self, op: Any) -> Any:
        await self.nodes.ready()
        if isinstance(op, Call):
            if op.role is not Role.WAIT:
                return await self.nodes.cmds.execute_command(*op.args)
            client = self.nodes.waits.get(op.node or await self.nodes.addr_of(str(op.key)))
            return await arun_steps(_wait_on(client, op, partial(client.execute_command,
                                                                 *op.args)))
        if isinstance(op, Pipe):
            try:
                groups = _Routing.groups(op, self.nodes.addr_for, list(self._dogs.clients))
            except rexc.SlotNotCoveredError:
                await self.nodes.refresh()
                groups = _Routing.groups(op, self.nodes.addr_for, list(self._dogs.clients))
            return await arun_steps(_fan_out(op, groups, self._dog_of))
        if isinstance(op, Refresh):
            return await self.nodes.refresh()
        raise TypeError(op)

    async def waits_for(self, key: str) -> Any:
        return self.nodes.waits.get(await self.nodes.addr_of(key))

    async def close(self) -> None:
        for dog in list(self._dogs.clients.values()):
            await dog.close()
        await self.nodes.close()
