"""What the client holds, until when it surely holds it, and what the watchdog renews.

One entry per (key, owner): the server renews an owner's hold on a key with one RENEW, whatever
its hold count or modes. An entry lives while at least one of its holds is not released.

**The local deadline** (docs/CLIENTS.md, the client contract): a hold is surely held until the
earlier of
- the send time of the last command that set its lease, plus the lease; and
- for a hold bound to a connection (BIND), the last moment that connection was known open (the
  send time of the last command answered on it) plus the grace: the server cuts the lease to
  the grace when the connection closes.

A *link* names one connection (equal links: the same connection, not reconnected in between);
the registry keeps, per link, the send time of the last command answered on it.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from ._protocol import Kind, Request

#: Why a hold is no longer held (``held.lost.reason``), the same values in every dlock client:
#: ``not_held`` (the server says this owner does not hold it: deleted, expired or taken over
#: there, or a release answered so), ``lease_expired`` (its local deadline passed before a
#: renewal got through: the lease, or the bind grace since its connection was last known
#: open), ``released`` (released by this program), ``closed`` (its client was closed while
#: it held it: nothing renews it any more).
LossReason = Literal["not_held", "lease_expired", "released", "closed"]


class LostBase:
    """``held.lost``: whether the hold is lost, read against the clock when asked.

    ``is_set()`` compares the hold's local deadline with ``time.monotonic()`` at the moment of
    asking (and sets itself when it has passed), so the answer never depends on the watchdog
    having run since the process resumed. It keeps the ``is_set()`` / ``wait()`` API of
    :class:`threading.Event` (sync) and :class:`asyncio.Event` (asyncio). ``reason`` says why
    (a :data:`LossReason`).
    """

    def __init__(self, event: Any) -> None:
        self.reason: LossReason | None = None
        self._deadline: DeadlineSource | None = None
        self._event = event  # a threading.Event or an asyncio.Event: what wait() waits on

    def is_set(self) -> bool:
        if self.reason is not None:
            return True
        source = self._deadline
        if source is not None:
            deadline = source.deadline()
            if deadline is not None and time.monotonic() >= deadline:
                self._fire("lease_expired")
                return True
        return False

    def _time_left(self) -> float | None:
        """Seconds until the local deadline, None when there is none to watch."""
        source = self._deadline
        deadline = None if source is None else source.deadline()
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _fire(self, reason: LossReason) -> None:
        if self.reason is None:
            self.reason = reason
            self._set_event()

    def _set_event(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self.is_set()

    def __repr__(self) -> str:
        return f"<lost {self.is_set()} reason={self.reason}>"


class DeadlineSource(Protocol):
    def deadline(self) -> float | None: ...


class HoldLike(Protocol):
    key: str
    owner: str
    kind: Kind
    count: int
    lost: LostBase
    _request: Request  # what was asked for
    _released: bool  # by the program (release() answered)


H = TypeVar("H", bound=HoldLike)


@dataclass(eq=False)
class Entry(Generic[H]):
    key: str
    owner: str
    kind: Kind  # of its first hold: what a script renewal runs (a lock, rwlock or semaphore)
    lease_ms: int
    next_due: float  # monotonic time of the next renewal
    lease_deadline: float  # send time of the last lease-setting command + lease
    link: Any  # the connection the hold is bound to; None: not bound
    holds: list[H] = field(default_factory=list)

    @property
    def lease(self) -> float:
        return self.lease_ms / 1000


def retry_interval(lease: float) -> float:
    """How soon a renewal that could not reach the server is tried again."""
    return min(lease / 10, 0.25)


class _EntryDeadline:
    """What a hold's ``lost`` reads: its entry's deadline while the entry is registered."""

    def __init__(self, registry: Registry[Any], key: tuple[str, str]) -> None:
        self._registry = registry
        self._key = key

    def deadline(self) -> float | None:
        return self._registry.deadline_of(self._key)


class Registry(Generic[H]):
    """Thread-safe: holds are added and released from the callers' threads."""

    def __init__(self, grace: float | None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], Entry[H]] = {}
        self._alive: dict[Any, float] = {}  # link -> send time of the last command answered
        self.grace = grace  # the bind grace in seconds, where holds are bound

    def __len__(self) -> int:
        return len(self._entries)

    def _deadline(self, entry: Entry[H]) -> float:
        deadline = entry.lease_deadline
        if entry.link is not None and self.grace is not None:
            deadline = min(deadline, self._alive.get(entry.link, -math.inf) + self.grace)
        return deadline

    def deadline_of(self, key: tuple[str, str]) -> float | None:
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else self._deadline(entry)

    def answered(self, link: Any, sent_at: float) -> None:
        """A command sent at `sent_at` was answered on `link`: it was open then."""
        if link is not None:
            with self._lock:
                self._alive[link] = max(self._alive.get(link, -math.inf), sent_at)

    def add(self, hold: H, lease_ms: int, sent_at: float, link: Any,
            first_renewal: float, count_holds: bool = False) -> Entry[H]:
        """A grant (or re-entry) by a command sent at `sent_at`, answered on `link` (None: not
        bound); the first renewal is due `first_renewal` seconds after. `count_holds`: the
        server did not say the hold count (the script backend's lock): it is the owner's
        holds of that kind, this one included."""
        self.answered(link, sent_at)
        with self._lock:
            key = (hold.key, hold.owner)
            entry = self._entries.get(key)
            if entry is None:
                entry = Entry(hold.key, hold.owner, hold.kind, lease_ms, math.inf, -math.inf,
                              link)
                self._entries[key] = entry
            entry.lease_ms = lease_ms
            entry.lease_deadline = sent_at + lease_ms / 1000
            entry.link = link
            entry.next_due = min(entry.next_due, sent_at + first_renewal)
            entry.holds.append(hold)
            if count_holds:
                hold.count = sum(1 for h in entry.holds if h.kind == hold.kind)
        hold.lost._deadline = _EntryDeadline(self, key)
        return entry

    def remove(self, hold: H) -> None:
        """Released: never renewed again for this hold, and its ``lost`` stops watching."""
        hold.lost._deadline = None
        with self._lock:
            entry = self._entries.get((hold.key, hold.owner))
            if entry is not None and hold in entry.holds:
                entry.holds.remove(hold)
                if not entry.holds:
                    del self._entries[(hold.key, hold.owner)]
                    self._forget_links()

    def _forget_links(self) -> None:
        live = {e.link for e in self._entries.values()}
        for link in [k for k in self._alive if k not in live]:
            del self._alive[link]

    def detach(self, hold: H) -> Entry[H] | None:
        """:meth:`remove`, answering the entry it was in, for :meth:`reattach`."""
        entry = self.entry(hold)
        self.remove(hold)
        return entry

    def reattach(self, hold: H, entry: Entry[H] | None) -> None:
        """Undoes :meth:`detach` (a release that failed): renewed and watched again."""
        if entry is None or hold.lost.reason is not None:
            return
        key = (hold.key, hold.owner)
        with self._lock:
            current = self._entries.setdefault(key, entry)
            if hold not in current.holds:
                current.holds.append(hold)
        hold.lost._deadline = _EntryDeadline(self, key)

    def clear(self) -> list[H]:
        """Forgets every hold (the client closed), answering them."""
        with self._lock:
            holds = [h for e in self._entries.values() for h in e.holds]
            self._entries.clear()
            self._alive.clear()
        for hold in holds:
            hold.lost._deadline = None
        return holds

    def entry(self, hold: H) -> Entry[H] | None:
        with self._lock:
            entry = self._entries.get((hold.key, hold.owner))
            return entry if entry is not None and hold in entry.holds else None

    def held(self, key: str, owner: str, kind: Kind) -> int:
        """What this owner holds on key in kind by our count (holds, or permits)."""
        with self._lock:
            entry = self._entries.get((key, owner))
            if entry is None:
                return 0
            return sum(h.count if h.kind == "semaphore" else 1
                       for h in entry.holds if h.kind == kind)

    def due(self, now: float) -> list[Entry[H]]:
        with self._lock:
            return [e for e in self._entries.values() if e.next_due <= now]

    def ping_due(self, now: float, link: Any, interval: float) -> bool:
        """Whether holds are bound to `link` and nothing answered on it for `interval`."""
        with self._lock:
            if not any(e.link == link for e in self._entries.values()):
                return False
            return self._alive.get(link, -math.inf) + interval <= now

    def next_wake(self, now: float, link: Any, ping_interval: float | None) -> float | None:
        """Seconds until something is due (a renewal, a deadline, a sign of life on `link`);
        None when nothing is held."""
        with self._lock:
            if not self._entries:
                return None
            soonest = min(min(e.next_due, self._deadline(e)) for e in self._entries.values())
            if ping_interval is not None and any(e.link == link and link is not None
                                                 for e in self._entries.values()):
                soonest = min(soonest, self._alive.get(link, -math.inf) + ping_interval)
        return max(0.0, soonest - now)

    def renewed(self, entry: Entry[H], sent_at: float, link: Any) -> None:
        """A renewal sent at `sent_at` answered on `link` (None: it did not bind)."""
        self.answered(link, sent_at)
        with self._lock:
            entry.lease_deadline = sent_at + entry.lease
            entry.link = link
            entry.next_due = sent_at + entry.lease / 3

    def gone(self, entry: Entry[H]) -> list[H]:
        """The server says the hold is gone: the entry's holds are lost."""
        with self._lock:
            if self._entries.get((entry.key, entry.owner)) is entry:
                del self._entries[(entry.key, entry.owner)]
            return list(entry.holds)

    def unreachable(self, entries: list[Entry[H]], now: float) -> None:
        with self._lock:
            for entry in entries:
                entry.next_due = now + retry_interval(entry.lease)

    def rebind_on(self, link: Any, role: Any, now: float) -> None:
        """`link` answered for `role`: holds bound to an earlier connection of that role (it
        reconnected) are renewed at once, which binds them to this one. On a cluster, of
        that role and node (a link's middle: ``(role, node, epoch)``)."""
        with self._lock:
            for e in self._entries.values():
                if (e.link is not None and e.link != link and e.link[0] == role
                        and e.link[1:-1] == link[1:-1]):
                    e.next_due = min(e.next_due, now)

    def expired(self, now: float) -> list[H]:
        """Holds whose local deadline passed before a renewal got through: lost."""
        lost: list[H] = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if self._deadline(entry) <= now:
                    del self._entries[key]
                    lost.extend(entry.holds)
        return lost
