"""The script backend's commands: Redisson's layout on a server without the dlock module.

The Lua texts are the Rust client's (``dlock_client::scripts``), read from the shipped export
(``_export``). Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

from ._export import text as text  # re-exported: the texts by name
from ._protocol import Arg, Request

#: The script run by each step, per kind of hold: (try, release, renew).
_NAMES = {
    "lock": ("lock", "unlock", "renew"),
    "read": ("rw_lock", "rw_unlock", "rw_renew"),
    "write": ("rw_lock", "rw_unlock", "rw_renew"),
    "semaphore": ("sem_acquire", "sem_release", "sem_renew"),
}


def unlock_message() -> str:
    return text("unlock_message")


@cache
def sha(name: str) -> str:
    return hashlib.sha1(text(name).encode()).hexdigest()


def channel(key: str, prefix: str | None = None) -> str:
    """Redisson's unlock channel of `key`: ``<prefix>:{key}``, or ``<prefix>:key`` when the key
    already has a hash tag (the rule of dlock-core's ``names::unlock_channel``)."""
    prefix = text("default_channel_prefix") if prefix is None else prefix
    return f"{prefix}:{key}" if "{" in key else f"{prefix}:{{{key}}}"


class Script:
    """One script invocation: ``EVALSHA`` (``EVAL`` of the same text when the server answers
    ``NOSCRIPT``)."""

    def __init__(self, name: str, keys: list[str], args: list[Arg]) -> None:
        self.name = name
        self.keys = keys
        self.args = args

    def evalsha(self) -> list[Arg]:
        return ["EVALSHA", sha(self.name), len(self.keys), *self.keys, *self.args]

    def eval(self) -> list[Arg]:
        return ["EVAL", text(self.name), len(self.keys), *self.keys, *self.args]


def try_script(request: Request, owner: str) -> Script:
    name = _NAMES[request.kind][0]
    if request.kind == "lock":
        return Script(name, [request.key], [request.lease_ms, owner])
    if request.kind == "semaphore":
        return Script(name, [request.key], [owner, request.capacity, request.lease_ms,
                                            request.count])
    return Script(name, [request.key], [owner, request.kind, request.lease_ms])


def parse_try(request: Request, reply: Any) -> tuple[bool, int]:
    """(granted, n): when granted, n is the hold count or permits (0 when the script does not
    say: the exclusive lock's); else how many ms to wait at most before trying again (-1: the
    key has no expiry). A semaphore of another capacity is a ValueError with the module's
    text."""
    if reply is None:
        return True, 0
    if isinstance(reply, int):
        return False, reply
    status, n = int(reply[0]), int(reply[1])
    if status == -1:
        raise ValueError(f"ERR semaphore capacity is {n}, not {request.capacity}")
    return status == 1, n


def release_script(request: Request, owner: str) -> Script:
    """Give back one hold (or the request's permits)."""
    name = _NAMES[request.kind][1]
    chan = channel(request.key)
    if request.kind == "lock":
        return Script(name, [request.key, chan], [unlock_message(), request.lease_ms, owner])
    if request.kind == "semaphore":
        return Script(name, [request.key, chan], [owner, request.count, unlock_message()])
    return Script(name, [request.key, chan], [owner, request.kind, unlock_message()])


def renew_script(kind: str, key: str, owner: str, lease_ms: int) -> Script:
    return Script(_NAMES[kind][2], [key], [lease_ms, owner])
