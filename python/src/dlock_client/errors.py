"""The exceptions of dlock_client: each names the server and the cause."""

from __future__ import annotations


class DlockError(Exception):
    """Base class of every error this package raises.

    ``server`` is the address the failing command went to (``host:port``, or a socket path).
    """

    def __init__(self, message: str, server: str = "") -> None:
        super().__init__(message)
        self.server = server


class ModuleNotLoadedError(DlockError):
    """The server answered ``unknown command``: the dlock module is not loaded there."""


class ServerConnectionError(DlockError, ConnectionError):
    """The server cannot be reached (refused, reset, timed out)."""


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
    """An option this server's dlock module does not know (e.g. ``LOCKDELAY`` on an old module)."""


class CommandError(DlockError):
    """Any other error reply (a bad argument, a full queue, ``ERR ...``)."""


class RedirectedError(DlockError):
    """On a Redis Cluster, a request followed as many ``MOVED``/``ASK`` redirects as it may
    (16) without reaching the key's node: the cluster's slot map does not settle. ``server``
    is the node the last redirect named."""
