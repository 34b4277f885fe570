"""The watchdog: renews the client's holds before their leases end, on a connection of its
own (RENEW ... BIND binds the holds to it, and a PING is its sign of life where nothing else
answered there lately), and loses the holds the server says are gone or whose local deadline
passed (docs/CLIENTS.md, the client contract).

Sans-I/O, as :mod:`._client`: a shell runs the watchdog as a thread (sync) or a task
(asyncio) that sleeps :meth:`Watchdog.doze` seconds (or until woken) and then runs the flow
:meth:`Watchdog.round`; ``renew()`` and a waited grant's confirmation run
:meth:`Watchdog.confirm`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import redis.exceptions as rexc

from ._effects import Flow, Pipe, Replies, Role
from ._holds import Entry, HoldLike, Registry
from ._protocol import first_unknown_option, is_unknown_option
from ._redirect import Follow, redirect_of
from .errors import RedirectedError

if TYPE_CHECKING:
    from ._backend import BackendBase
    from ._protocol import BindSupport

H = TypeVar("H", bound=HoldLike)


class Watched(Protocol[H]):
    """What the watchdog reads of its client (:class:`._client.ClientCore` is one; this module
    does not import it, which imports this one)."""

    @property
    def registry(self) -> Registry[H]: ...
    @property
    def bind_renew(self) -> BindSupport: ...
    @property
    def cluster(self) -> bool: ...
    def detect(self) -> Flow[BackendBase]: ...


class Watchdog(Generic[H]):
    """The renewals of one client's holds (its registry, :class:`._holds.Registry`)."""

    def __init__(self, client: Watched[H]) -> None:
        self.client = client
        self.registry = client.registry
        #: Monotonic time the watchdog wakes by itself: an acquire due before wakes it.
        self.sleeps_until = -math.inf
        # The watchdog's connections' links, once they answered: one, or one per node of a
        # Redis Cluster (keyed by what a link says besides its epoch).
        self.links: dict[Any, Any] = {}

    @property
    def ping_interval(self) -> float | None:
        """The sign of life on the watchdog's connection, where holds are bound to it."""
        grace = self.registry.grace
        return None if grace is None or not self.client.bind_renew.supported else grace / 3

    # -- the shell's loop ---------------------------------------------------------------

    def doze(self) -> float | None:
        """Seconds the watchdog may sleep before its next :meth:`round` (None: until woken)."""
        self.sleeps_until = -math.inf  # an acquire meanwhile wakes it
        now = time.monotonic()
        wake = self.next_wake(now)
        self.sleeps_until = math.inf if wake is None else now + wake
        return wake

    def next_wake(self, now: float) -> float | None:
        wakes = [self.registry.next_wake(now, link, self.ping_interval)
                 for link in list(self.links.values()) or [None]]
        return min((w for w in wakes if w is not None), default=None)

    def wake_for(self, hold: H) -> bool:
        """Whether the watchdog must be woken for a new hold: only when it is due before the
        watchdog wakes anyway (most acquires cost the watchdog nothing)."""
        entry = self.registry.entry(hold)
        return entry is not None and entry.next_due < self.sleeps_until

    def round(self) -> Flow[None]:
        """One round: holds past their deadline are lost; due renewals (and, where holds are
        bound to its connection and nothing else answered there lately, a PING) go out in
        one pipeline."""
        now = time.monotonic()
        for hold in self.registry.expired(now):
            hold.lost._fire("lease_expired")
        due = self.registry.due(now)
        interval = self.ping_interval
        ping = interval is not None and any(self.registry.ping_due(now, link, interval)
                                            for link in list(self.links.values()))
        if not due and not ping:
            return
        sent = time.monotonic()
        try:
            # On a cluster renewals prove only their own nodes' connections: the PING goes
            # to every node's with them.
            replies = yield from self._renew_pipe(due, ping=ping and (not due or
                                                                      self.client.cluster))
        except (rexc.RedisError, OSError):  # not reached (or the module went away)
            self.registry.unreachable(due, time.monotonic())
            return
        self._apply(due, replies, sent)
        for link in list(self.links.values()):
            self.registry.rebind_on(link, Role.DOG, time.monotonic())

    # -- renewing -----------------------------------------------------------------------

    def confirm(self, entry: Entry[H]) -> Flow[bool]:
        """One renewal now (``renew()``, a waited grant's confirmation): whether it is held."""
        sent = time.monotonic()
        replies = yield from self._renew_pipe([entry])
        reply = replies.values[0]
        if isinstance(reply, BaseException) and _not_reached(reply):
            raise reply  # a cluster's node not reached: as a connection error elsewhere
        return self._apply([entry], replies, sent)[0]

    def _renew_pipe(self, due: list[Entry[H]], ping: bool = False) -> Flow[Replies]:
        """One pipeline of renewals (RENEW ... BIND, binding the holds to the watchdog's
        connection) on the watchdog's connection, with a PING when asked."""
        client = self.client
        backend = yield from client.detect()
        keys: list[str | None] = [e.key for e in due]
        if ping:
            keys.append(None)

        def send(bind: int | None) -> Pipe:
            cmds = [backend.renew_command(e, bind) for e in due]
            return Pipe(Role.DOG, cmds + [["PING"]] if ping else cmds, keys)

        bind = client.bind_renew.arg() if backend.native else None
        result: Replies = yield send(bind)
        unknown = first_unknown_option(result.values)
        if unknown is not None and client.bind_renew.retry_without(unknown, bind):
            bind = None
            result = yield send(None)
        reload = backend.reload(result.values)
        if reload is not None:
            yield reload
            result = yield send(None)
        if client.cluster:
            result = yield from self._follow_renewals(
                due, result, lambda e: backend.renew_command(e, bind))
        if bind is not None and not any(is_unknown_option(r) for r in result.values
                                        if isinstance(r, BaseException)):
            client.bind_renew.accepted(bind)
        for link in result.all_links():
            self.links[link[1:-1]] = link  # per node, the latest connection
        return result if bind is not None else Replies(result.values, None)

    def _follow_renewals(self, due: list[Entry[H]], result: Replies,
                         command: Callable[[Entry[H]], list[Any]]) -> Flow[Replies]:
        """On a cluster: each renewal answered with a redirect (its key's slot moved) is sent
        again where the redirect points, on that node's watchdog connection, for up to a
        second; one still redirected then is tried again at the next round."""
        values = list(result.values)
        links = [result.link_of(i) for i in range(len(values))]
        answered = result.all_links()
        for i, entry in enumerate(due):
            follow = Follow(entry.key, time.monotonic() + 1.0, waits=False)
            try:
                step = follow.after(values[i]) if isinstance(values[i], Exception) else None
                while step is not None:
                    yield from step.effects()
                    t = follow.next_try()
                    if t is None:
                        break
                    one: Replies = yield Pipe(Role.DOG, [command(entry)], [entry.key],
                                              node=t.addr, asking=t.asking)
                    values[i], links[i] = one.values[0], one.link_of(0)
                    answered += one.all_links()
                    step = follow.after(values[i]) if isinstance(values[i], Exception) else None
            except RedirectedError as error:
                values[i] = error
        return Replies(values, None, links, answered)

    def _apply(self, due: list[Entry[H]], replies: Replies, sent: float) -> list[bool]:
        """The replies to the renewals of `due` sent at `sent`; fires ``lost`` on the holds
        the server says are gone (a reply other than 1: 0, or an error such as WRONGTYPE).
        On a cluster, a renewal whose node could not be reached, or still redirected, is
        tried again soon (the others are applied)."""
        for link in replies.all_links():
            self.registry.answered(link, sent)
        out = []
        for i, (entry, reply) in enumerate(zip(due, replies.values, strict=False)):
            if reply == 1:
                self.registry.renewed(entry, sent, replies.link_of(i))
                out.append(True)
            elif _not_reached(reply):
                self.registry.unreachable([entry], time.monotonic())
                out.append(False)
            else:
                for hold in self.registry.gone(entry):
                    hold.lost._fire("not_held")
                out.append(False)
        return out


def _not_reached(reply: Any) -> bool:
    """A renewal's value that says nothing about the hold: its node could not be reached (a
    cluster's shell answers a node's commands so), or it was still redirected."""
    if isinstance(reply, (rexc.ConnectionError, rexc.TimeoutError, OSError, RedirectedError)):
        return True
    return isinstance(reply, rexc.ResponseError) and redirect_of(reply) is not None

