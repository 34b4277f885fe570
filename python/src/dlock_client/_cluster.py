"""The package's connections to a Redis Cluster's nodes, derived from the caller's redis-py
cluster client (sync or asyncio), and a command sent on a dedicated connection to the node
serving its key, following the cluster's redirects (:func:`node_call`, :func:`anode_call`).

- short commands (releases, INFO, WAITERS, acquires without wait) go on a RedisCluster of the
  package's own (``cmds``): redis-py routes each by its key (the module declares the key's
  position in ``COMMAND``) and follows MOVED/ASK/TRYAGAIN; read time-out ``command_timeout``,
  no re-send after a lost connection;
- waits go on a dedicated connection to the key's master (a pool per node, no read time-out),
  found in ``cmds``' slot map; :class:`~._redirect.Follow` carries them across redirects;
- the watchdog has a pool of its own per node (read time-out at most 1 s): renewals are
  pipelined per node, and RENEW ... BIND binds a node's holds to that node's connection.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions as rexc

from ._redirect import Follow, Go, Pause

# Settings of the caller's client that the package's connections keep. Not carried: those the
# package sets (time-outs, retries, decoding) and those that would route elsewhere (replicas).
_NOT_CARRIED = frozenset({
    "host", "port", "startup_nodes", "retry", "retry_on_error", "retry_on_timeout",
    "socket_timeout", "decode_responses", "connection_pool", "redis_connect_func", "db",
    "path", "read_from_replicas", "load_balancing_strategy", "response_callbacks", "cache",
    "cache_config", "connection_pool_class", "nodes_flag", "url",
})


def is_cluster(client: Any) -> bool:
    return isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster))


def _seeds(rc: Any) -> List[Tuple[str, int]]:
    """The nodes the caller's client knows (or was given to start from)."""
    nodes: Dict[str, Any] = {}
    manager = rc.nodes_manager
    for source in (getattr(manager, "nodes_cache", {}), getattr(manager, "startup_nodes", {})):
        nodes.update(source)
    return [(n.host, int(n.port)) for n in nodes.values()]


def _caller_settings(rc: Any) -> Tuple[Dict[str, Any], Any]:
    """The caller's connection keyword arguments and connection class."""
    if isinstance(rc, redis.cluster.RedisCluster):
        node = rc.get_default_node() or next(iter(rc.get_nodes()), None)
        if node is not None and node.redis_connection is not None:
            pool = node.redis_connection.connection_pool
            return dict(pool.connection_kwargs), pool.connection_class
    kwargs = dict(rc.get_connection_kwargs())
    return kwargs, kwargs.get("connection_class")


def derive_cluster(rc: Any, socket_timeout: Optional[float], retry: Any) -> Any:
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
    if _redis_version() < (5, 3):  # before 5.3 these retries were not the `retry`'s
        settings["cluster_error_retry_attempts"] = 0
    seeds = [node_cls(host, port) for host, port in _seeds(rc)]
    return cls(startup_nodes=seeds, socket_timeout=socket_timeout, retry=retry,
               decode_responses=True, **settings)


def _redis_version() -> Tuple[int, ...]:
    try:
        return tuple(int(p) for p in redis.__version__.split(".")[:2])
    except ValueError:
        return (99,)


def _master_addr(cluster: Any, key: str) -> str:
    node = cluster.get_node_from_key(key)
    if node is None:
        raise rexc.SlotNotCoveredError(f"the slot of {key!r} is not covered by the cluster")
    return str(node.name)


def _host(addr: str) -> str:
    return addr.rsplit(":", 1)[0]


class _NodeClients:
    """Plain clients per node address (``host:port``), made from a template's keyword
    arguments with the address replaced."""

    def __init__(self, make: Callable[[str, int], Any]) -> None:
        self._make = make
        self.clients: Dict[str, Any] = {}

    def get(self, addr: str) -> Any:
        client = self.clients.get(addr)
        if client is None:
            host, port = addr.rsplit(":", 1)
            client = self.clients[addr] = self._make(host, int(port))
        return client


def _node_kwargs(kwargs: Dict[str, Any], retry: Any, socket_timeout: Optional[float],
                 host: str, port: int) -> Dict[str, Any]:
    out = {k: v for k, v in kwargs.items()
           if k not in ("connection_pool", "redis_connect_func", "retry_on_timeout",
                        "retry_on_error")}
    out.update(host=host, port=port, retry=retry, socket_timeout=socket_timeout,
               socket_keepalive=True, decode_responses=True)
    return out


class Nodes:
    """A sync cluster: ``cmds`` (routing), and per node the waits' and the watchdog's pools."""

    def __init__(self, rc: "redis.cluster.RedisCluster", retry: Any, command_timeout: float,
                 dog_timeout: float) -> None:
        self.cmds: redis.cluster.RedisCluster = derive_cluster(rc, command_timeout, retry)
        pool = self._template()
        kwargs, connection_class = dict(pool.connection_kwargs), pool.connection_class

        def maker(timeout: Optional[float]) -> Callable[[str, int], Any]:
            return lambda host, port: redis.Redis(connection_pool=redis.ConnectionPool(
                connection_class=connection_class,
                **_node_kwargs(kwargs, retry, timeout, host, port)))
        self.waits = _NodeClients(maker(None))
        self.dogs = _NodeClients(maker(dog_timeout))

    def _template(self) -> Any:
        node = self.cmds.get_default_node()
        return self.cmds.get_redis_connection(node).connection_pool

    @property
    def name(self) -> str:
        """How errors name the cluster: its seed nodes."""
        return "cluster " + ",".join(n.name for n in self.cmds.get_nodes()[:3])

    def addr_for(self, key: str) -> str:
        """The master serving `key`'s slot, as the cached slot map says."""
        try:
            return _master_addr(self.cmds, key)
        except rexc.SlotNotCoveredError:
            self.refresh()
            return _master_addr(self.cmds, key)

    def refresh(self) -> None:
        """Reads the slot map again (after a MOVED)."""
        self.cmds.nodes_manager.initialize()

    def close(self) -> None:
        for clients in (self.waits, self.dogs):
            for c in clients.clients.values():
                c.close()
                c.connection_pool.disconnect()
        self.cmds.close()


class AsyncNodes:
    """The same for an asyncio cluster; :meth:`ready` before first use (the cluster client
    reads its slot map then)."""

    def __init__(self, rc: "redis.asyncio.cluster.RedisCluster", retry: Any,
                 command_timeout: float, dog_timeout: float) -> None:
        self.cmds: redis.asyncio.cluster.RedisCluster = derive_cluster(rc, command_timeout,
                                                                       retry)
        self._retry = retry
        self._dog_timeout = dog_timeout
        self._ready = False
        self.waits = _NodeClients(self._maker(None))
        self.dogs = _NodeClients(self._maker(dog_timeout))

    def _maker(self, timeout: Optional[float]) -> Callable[[str, int], Any]:
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

    @property
    def name(self) -> str:
        return "cluster " + ",".join(n.name for n in self.cmds.get_nodes()[:3])

    def addr_for(self, key: str) -> str:
        """The master serving `key`'s slot, as the cached slot map says (after :meth:`ready`;
        a slot not covered: :meth:`refresh`, then ask again)."""
        return _master_addr(self.cmds, key)

    async def refresh(self) -> None:
        await self.cmds.nodes_manager.initialize()

    async def close(self) -> None:
        for clients in (self.waits, self.dogs):
            for c in clients.clients.values():
                await c.aclose() if hasattr(c, "aclose") else await c.close()
                await c.connection_pool.disconnect()
        await (self.cmds.aclose() if hasattr(self.cmds, "aclose") else self.cmds.close())


def _asked(client: Any, args: List[Any]) -> Any:
    """`args` after ``ASKING`` on one connection; an error reply raised as it came."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("ASKING")
    pipe.execute_command(*args)
    return pipe


def _reply(replies: List[Any]) -> Any:
    reply = replies[-1]
    if isinstance(reply, Exception):
        raise reply
    return reply


def node_call(nodes: Nodes, clients: _NodeClients, key: str, follow: Follow,
              command: Callable[[Optional[int]], List[Any]]) -> Any:
    """Sends ``command(wait_ms)`` to the node serving `key` on a connection of `clients`,
    following redirects as `follow` rules: MOVED (slot map read again) and ASK (``ASKING``
    first) to the node named, TRYAGAIN/CLUSTERDOWN/UNBLOCKED again after a pause, each try
    asking only for what is left of the deadline. The reply; None when the time ran out
    between tries (not granted). A cut-short call (an exception, KeyboardInterrupt) closes
    its connection, which drops a waiter from the node's queue."""
    while True:
        t = follow.next_try()
        if t is None:
            return None
        addr = t.addr or nodes.addr_for(key)
        client = clients.get(addr)
        try:
            if t.asking:
                return _reply(_asked(client, command(t.wait_ms)).execute(raise_on_error=False))
            return client.execute_command(*command(t.wait_ms))
        except rexc.ResponseError as error:
            step = follow.after(error, _host(addr))
            if step is None:
                raise
        if isinstance(step, Pause):
            time.sleep(step.seconds)
        elif isinstance(step, Go) and step.moved:
            nodes.refresh()


async def anode_call(nodes: AsyncNodes, clients: _NodeClients, key: str, follow: Follow,
                     command: Callable[[Optional[int]], List[Any]]) -> Any:
    """:func:`node_call` for asyncio (a cancelled call closes its connection likewise)."""
    while True:
        t = follow.next_try()
        if t is None:
            return None
        await nodes.ready()
        try:
            addr = t.addr or nodes.addr_for(key)
        except rexc.SlotNotCoveredError:
            await nodes.refresh()
            addr = nodes.addr_for(key)
        client = clients.get(addr)
        try:
            if t.asking:
                return _reply(await _asked(client, command(t.wait_ms)).execute(
                    raise_on_error=False))
            return await client.execute_command(*command(t.wait_ms))
        except rexc.ResponseError as error:
            step = follow.after(error, _host(addr))
            if step is None:
                raise
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
        elif isinstance(step, Go) and step.moved:
            await nodes.refresh()


def group_by_node(keys: Iterable[str], addr_for: Callable[[str], str]) -> Dict[str, List[int]]:
    """Indexes of `keys` per node address, in order: one pipeline per node."""
    groups: Dict[str, List[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(addr_for(key), []).append(i)
    return groups

