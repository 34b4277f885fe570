"""What the watchdog renews, and when: the bookkeeping shared by the thread and the task.

One entry per (key, owner): the server renews an owner's hold on a key with one RENEW, whatever
its hold count or modes. An entry lives while at least one of its holds is not released.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Generic, List, Optional, Protocol, Tuple, TypeVar

from ._protocol import Kind


class HoldLike(Protocol):
    key: str
    owner: str
    kind: Kind
    count: int


H = TypeVar("H", bound=HoldLike)


@dataclass(eq=False)
class Entry(Generic[H]):
    key: str
    owner: str
    lease_ms: int
    next_due: float  # monotonic time of the next renewal
    deadline: float  # monotonic time by which the server surely still has the lease
    holds: List[H] = field(default_factory=list)

    @property
    def lease(self) -> float:
        return self.lease_ms / 1000


def retry_interval(lease: float) -> float:
    """How soon a renewal that could not reach the server is tried again."""
    return min(lease / 10, 0.25)


class Registry(Generic[H]):
    """Thread-safe: holds are added and released from the callers' threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: Dict[Tuple[str, str], Entry[H]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, hold: H, lease_ms: int, granted_at: float, first_renewal: float) -> None:
        """A grant made (or re-entered) at `granted_at`: the server's lease runs from then;
        the first renewal is due `first_renewal` seconds later."""
        lease = lease_ms / 1000
        with self._lock:
            entry = self._entries.get((hold.key, hold.owner))
            if entry is None:
                entry = Entry(hold.key, hold.owner, lease_ms, 0.0, 0.0)
                self._entries[(hold.key, hold.owner)] = entry
            entry.lease_ms = lease_ms
            entry.deadline = granted_at + lease
            entry.next_due = min(entry.next_due or math.inf, granted_at + first_renewal)
            entry.holds.append(hold)

    def remove(self, hold: H) -> None:
        """Released: never renewed again for this hold."""
        with self._lock:
            entry = self._entries.get((hold.key, hold.owner))
            if entry is not None and hold in entry.holds:
                entry.holds.remove(hold)
                if not entry.holds:
                    del self._entries[(hold.key, hold.owner)]

    def held(self, key: str, owner: str, kind: Kind) -> int:
        """What this owner holds on key in kind by our count (holds, or permits)."""
        with self._lock:
            entry = self._entries.get((key, owner))
            if entry is None:
                return 0
            return sum(h.count if h.kind == "semaphore" else 1 for h in entry.holds if h.kind == kind)

    def due(self, now: float) -> List[Entry[H]]:
        with self._lock:
            return [e for e in self._entries.values() if e.next_due <= now]

    def next_wake(self, now: float) -> Optional[float]:
        """Seconds until something is due (a renewal or a deadline); None when nothing is held."""
        with self._lock:
            if not self._entries:
                return None
            soonest = min(min(e.next_due, e.deadline) for e in self._entries.values())
        return max(0.0, soonest - now)

    def renewed(self, entry: Entry[H], sent_at: float) -> None:
        with self._lock:
            entry.deadline = sent_at + entry.lease
            entry.next_due = sent_at + entry.lease / 3

    def gone(self, entry: Entry[H]) -> List[H]:
        """The server says the hold is gone: the entry's holds are lost."""
        with self._lock:
            if self._entries.get((entry.key, entry.owner)) is entry:
                del self._entries[(entry.key, entry.owner)]
            return list(entry.holds)

    def unreachable(self, entry: Entry[H], now: float) -> None:
        with self._lock:
            entry.next_due = now + retry_interval(entry.lease)

    def apply(self, due: List[Entry[H]], replies: List[Any], sent_at: float) -> List[H]:
        """The replies to the RENEWs of `due` sent at `sent_at`; the holds now lost: a reply
        other than 1 (0, or an error such as WRONGTYPE) says the hold is gone."""
        lost: List[H] = []
        for entry, reply in zip(due, replies):
            if reply == 1:
                self.renewed(entry, sent_at)
            else:
                lost.extend(self.gone(entry))
        return lost

    def all_unreachable(self, due: List[Entry[H]], now: float) -> None:
        for entry in due:
            self.unreachable(entry, now)

    def expired(self, now: float) -> List[H]:
        """Holds whose lease ran out before a renewal got through: lost."""
        lost: List[H] = []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if entry.deadline <= now:
                    del self._entries[key]
                    lost.extend(entry.holds)
        return lost
