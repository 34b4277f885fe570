"""The connections the package opens, derived from the caller's redis-py client.

The caller's client says where the server is (host, TLS, password, Sentinel service); the
package opens its own pools from those settings, with the socket settings its commands need:
- waits: no read time-out (the server answers by the end of the WAIT), keep-alive on;
- short commands and the watchdog: a read time-out, so a server that hangs is noticed;
- all: a connect time-out of at most the response time-out (a server that does not accept
  is noticed as one that does not answer);
- all: no automatic retry (a re-sent WAIT re-queues at the tail; a re-sent RELEASE of a
  reentrant hold releases one hold too many), and replies decoded as text.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._protocol import server_name


def derive(pool: Any, retry: Any, socket_timeout: float | None,
           response_timeout: float) -> tuple[dict[str, Any], str]:
    """Connection keyword arguments for a new pool like `pool`, and the server's name."""
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "connection_pool"}
    kwargs["socket_connect_timeout"] = connect_timeout(kwargs, response_timeout)
    for legacy in ("retry_on_timeout", "retry_on_error"):
        kwargs.pop(legacy, None)
    no_maintenance_notifications(kwargs)
    kwargs.update(
        retry=retry,
        socket_timeout=socket_timeout,
        socket_keepalive=True,
        decode_responses=True,
        connection_class=pool.connection_class,
    )
    return kwargs, server_name(kwargs, getattr(pool, "service_name", None))


def connect_timeout(kwargs: dict[str, Any], response_timeout: float) -> float:
    """The caller's connect time-out, at most the response time-out."""
    theirs = kwargs.get("socket_connect_timeout")
    return response_timeout if theirs is None else min(theirs, response_timeout)


def no_maintenance_notifications(kwargs: dict[str, Any]) -> None:
    """Turns redis-py's maintenance notifications off in connection (or cluster) keyword
    arguments: redis-py >= 7 skips the check of a pooled connection's health on checkout (a
    connection the server closed meanwhile is then used, and fails) while they are on ("auto"
    by default); this package's pools need the check and use no push notifications."""
    for handler in ("maint_notifications_pool_handler",
                    "oss_cluster_maint_notifications_handler"):
        kwargs.pop(handler, None)
    if "maint_notifications_config" in kwargs:
        from redis.maint_notifications import MaintNotificationsConfig

        kwargs["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)


def new_pool(pool: Any, kwargs: dict[str, Any]) -> Any:
    """A pool of the same kind as `pool` (a Sentinel-managed master stays one)."""
    service = getattr(pool, "service_name", None)
    if service is not None:
        return type(pool)(service, pool.sentinel_manager, is_master=pool.is_master, **kwargs)
    return type(pool)(**kwargs) if _plain(pool) else _base(pool)(**kwargs)


def _plain(pool: Any) -> bool:
    return type(pool).__name__ == "ConnectionPool"


def _base(pool: Any) -> Any:
    """A blocking or custom pool becomes a plain one of the same module (sync or asyncio)."""
    for cls in type(pool).__mro__:
        if cls.__name__ == "ConnectionPool":
            return cls
    return type(pool)


class Pools(NamedTuple):
    server: str  # how errors name the server
    waits: Any  # a redis-py client (sync or asyncio) for WAITs: no read time-out
    cmds: Any  # the same for short commands: `response_timeout`
    dog_pool: Any  # the watchdog's own pool: read time-out at most 1 s


def open_pools(redis_client: Any, redis_class: Any, retry: Any,
               response_timeout: float) -> Pools:
    """The package's pools, derived from the caller's client (sync or asyncio classes)."""
    pool = redis_client.connection_pool
    wait_kwargs, server = derive(pool, retry, None, response_timeout)
    cmd_kwargs, _ = derive(pool, retry, response_timeout, response_timeout)
    # The watchdog must notice a server that hangs well within a lease.
    dog_kwargs, _ = derive(pool, retry, min(response_timeout, 1.0), response_timeout)
    return Pools(server, redis_class(connection_pool=new_pool(pool, wait_kwargs)),
                 redis_class(connection_pool=new_pool(pool, cmd_kwargs)),
                 new_pool(pool, dog_kwargs))
