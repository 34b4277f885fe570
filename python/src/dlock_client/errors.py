"""The exceptions of dlock_client: each names the server and the cause.

They live in redis-py's hierarchy: every one is a :class:`redis.exceptions.RedisError` (so
``except redis.RedisError`` catches them), the connection error is also redis-py's
:class:`redis.exceptions.ConnectionError`, and the redis-py error that caused one is kept as
its ``__cause__``.
"""

from __future__ import annotations

import concurrent.futures

import redis.exceptions as rexc

__all__ = [
    "AcquireCancelledError",
    "AcquireTimeoutError",
    "ClientClosedError",
    "CommandError",
    "ConfigError",
    "DeadlockError",
    "DlockError",
    "ModuleNotLoadedError",
    "NotHeldError",
    "NotSupportedError",
    "RedirectedError",
    "ResponseTimeoutError",
    "ServerConnectionError",
    "WrongTypeError",
]

class DlockError(rexc.RedisError):
    """Base class of every error this package raises.

    ``server`` is the address the failing command went to (``host:port``, or a socket path).
    """

    def __init__(self, message: str, server: str = "") -> None:
        super().__init__(message)
        self.server = server


class ModuleNotLoadedError(DlockError):
    """The server answered ``unknown command``: the dlock module is not loaded there (only with
    ``backend="native"``; ``"auto"`` falls back to the script backend)."""


class ServerConnectionError(DlockError, rexc.ConnectionError, ConnectionError):
    """The server cannot be reached (refused, reset, timed out): also redis-py's
    ``ConnectionError`` and the built-in one."""


class ResponseTimeoutError(ServerConnectionError, rexc.TimeoutError, TimeoutError):
    """The server did not answer within the client's ``response_timeout`` (stopped, hung, or
    unreachable without a reset): also redis-py's :class:`~redis.exceptions.TimeoutError` and
    the built-in :class:`TimeoutError`, and a :class:`ServerConnectionError` (which it was
    before it had a class of its own)."""


class ClientClosedError(DlockError):
    """A call on a client that was closed (``close()`` / ``aclose()``), or a call that was in
    flight when it was closed (a waiting ``acquire()``)."""


class NotHeldError(DlockError, rexc.LockNotOwnedError):
    """``release()`` of a hold that is no longer held: released already, or lost (the server
    says the owner does not hold it, or its lease ran out). Also redis-py's
    :class:`~redis.exceptions.LockNotOwnedError`, which redis-py's ``Lock.release()`` raises
    for the same mistake."""


class AcquireCancelledError(DlockError, concurrent.futures.CancelledError):
    """The sync API: a waiting ``acquire(cancel=...)`` whose `cancel` event was set (from any
    thread); nothing is left held or queued. Also a :class:`concurrent.futures.CancelledError`.
    (Under asyncio, cancelling the task raises :class:`asyncio.CancelledError` as usual.)"""


class WrongTypeError(DlockError):
    """The key holds a value that is not a lock of the requested kind (``WRONGTYPE``)."""


class DeadlockError(DlockError):
    """The server refused a wait that would close a cycle of owners (``DEADLOCK ...``); the
    request changed nothing.

    ``cycle`` is the server's description: ``<owner> waits for <key> held by <owner>, ...``.
    """

    @property
    def cycle(self) -> str:
        return str(self.args[0]).split("DEADLOCK ", 1)[-1]


class NotSupportedError(DlockError):
    """An option the server cannot serve: one this server's dlock module does not know (e.g.
    ``LOCKDELAY`` on an old module), or one that needs the module where the script backend
    serves the client (fencing tokens, ``lock_delay``, ``waiters()``, ``info()``)."""


class CommandError(DlockError):
    """Any other error reply (a bad argument, a full queue, ``ERR ...``)."""


class ConfigError(DlockError, ValueError):
    """An argument refused where it is given (``lease=0``, ``lock_delay=120``, an unknown
    ``backend``...), before anything is sent; also a :class:`ValueError`."""


class AcquireTimeoutError(DlockError, rexc.LockError, TimeoutError):
    """``with lock(timeout=...)``: the lock was not granted within the time-out (also
    redis-py's :class:`~redis.exceptions.LockError`, as its ``Lock`` raises in ``with``, and
    the built-in :class:`TimeoutError`)."""


class RedirectedError(DlockError):
    """On a Redis Cluster, a request followed as many ``MOVED``/``ASK`` redirects as it may
    (16) without reaching the key's node: the cluster's slot map does not settle. ``server``
    is the node the last redirect named."""
