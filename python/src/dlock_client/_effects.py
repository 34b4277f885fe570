"""The I/O requests of the sans-I/O core, and the shape of its flows.

Every piece of logic of the package (deciding, building commands, parsing replies, deadlines,
owner bookkeeping) is written once, in :mod:`._client` and the modules it calls, as a
*flow*: a generator that yields one of the requests below whenever it needs I/O and gets the
result sent back (or the
exception thrown in). The sync client (``_sync.py``) and the asyncio client (``asyncio.py``)
are two shells that run flows: one with blocking calls, one awaiting.

A request names the *role* of the connection it goes to, never a connection: the shell owns
the connections and decides which one serves a role (and, for a Redis Cluster, which node:
every request carries the key it is about).
"""

from __future__ import annotations

import enum
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class Role(enum.Enum):
    #: A waiting acquire: a connection of its own for the time of the wait, no read time-out.
    WAIT = "wait"
    #: Short commands (tries, releases, INFO, WAITERS): a pooled connection, read time-out.
    CMD = "cmd"
    #: The watchdog's one long-lived connection: renewals (RENEW ... BIND binds holds to it)
    #: and the sign of life (PING). Used by one caller at a time.
    DOG = "dog"


@dataclass(frozen=True)
class Call:
    """One command; the result is its reply, an error reply is raised (redis-py's
    exceptions, untranslated)."""

    role: Role
    args: Sequence[Any]
    key: str | None = None
    #: Part of the clean-up after a cut-short acquire: the asyncio shell lets a second
    #: cancellation not interrupt it.
    cleanup: bool = False
    #: On a Redis Cluster, the node (``host:port``) a redirect named (None: the node serving
    #: `key` in the shell's slot map), and whether ``ASKING`` goes first (an ``ASK``).
    node: str | None = None
    asking: bool = False
    #: A WAIT: how long its reply may take (the wait plus one response time-out), after which
    #: the shell closes its connection and raises redis-py's ``TimeoutError``; None: no limit.
    #: Other roles have the response time-out of their connections.
    reply_within: float | None = None


@dataclass(frozen=True)
class Pipe:
    """Commands sent together on one connection (no transaction). The result is a
    :class:`Replies`: error replies are values, a connection error is raised.

    On a Redis Cluster the shell sends each node its commands (by `keys`) on that node's
    connection of the role, and a command without key (the PING) to every node it has such a
    connection to; a node it cannot reach answers its commands with the connection error as
    the value. `node`/`asking`: all commands to that node (a redirected renewal)."""

    role: Role
    commands: Sequence[Sequence[Any]]
    keys: Sequence[str | None]
    node: str | None = None
    asking: bool = False


@dataclass(frozen=True)
class Replies:
    values: list[Any]
    #: Which connection answered: equal links mean the same connection, not reconnected in
    #: between (RENEW ... BIND binds to a connection, and a sign of life proves only its own).
    #: A link is ``(role, epoch)``, or on a cluster ``(role, node, epoch)``; None on a cluster,
    #: where `links` say it per value.
    link: Any
    #: On a cluster: the link that answered each value.
    links: list[Any] | None = None
    #: On a cluster: every link that answered during the exchange (the PING's included).
    answered: list[Any] | None = None

    def link_of(self, i: int) -> Any:
        return self.link if self.links is None else self.links[i]

    def all_links(self) -> list[Any]:
        """Every link known open by this exchange."""
        if self.answered is not None:
            return list(self.answered)
        return [] if self.link is None else [self.link]


@dataclass(frozen=True)
class Refresh:
    """On a Redis Cluster, read the slot map again (after a ``MOVED``); nothing elsewhere."""


@dataclass(frozen=True)
class Subscribe:
    """Send SUBSCRIBE for a channel (the script backend's unlock channel) on a pub/sub
    connection of its own; the result is a handle (redis-py's ``PubSub``) for
    :class:`Listen` and :class:`Unsubscribe`."""

    channel: str
    key: str


@dataclass(frozen=True)
class Listen:
    """Wait up to `timeout` seconds (None: without limit) for the next pub/sub message of a
    subscription; the result is the message (redis-py's dict) or None."""

    handle: Any
    timeout: float | None


@dataclass(frozen=True)
class Unsubscribe:
    handle: Any


@dataclass(frozen=True)
class Sleep:
    seconds: float
    cleanup: bool = False  # as Call.cleanup


Op = Call | Pipe | Refresh | Subscribe | Listen | Unsubscribe | Sleep

#: A flow: yields requests, receives their results, returns a T.
Flow = Generator[Op, Any, T]
