"""The dlock commands as words and replies as values: shared by the sync and asyncio APIs.

Nothing here does I/O. Every rule of the command contract the package depends on (argument
order, option names, reply shapes, error prefixes) is written once, here.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import redis.exceptions as rexc

from ._export import limits
from .errors import (
    CommandError,
    ConfigError,
    DeadlockError,
    DlockError,
    ModuleNotLoadedError,
    NotSupportedError,
    ResponseTimeoutError,
    ServerConnectionError,
    WrongTypeError,
)

#: What a hold is: an exclusive lock, either mode of a read-write lock, or semaphore permits.
Kind = Literal["lock", "read", "write", "semaphore"]

Arg = str | int


def new_owner_prefix() -> str:
    """128 random bits: the first half of every owner id of one client."""
    return secrets.token_hex(16)


def _limit(name: str) -> int:
    """The module's argument limits (dlock-core's `limits`, exported with the scripts)."""
    return limits()[name]


def to_ms(seconds: float, what: str, positive: bool = False,
          most_ms: int | None = None) -> int:
    """Seconds (a lease, a grace, a delay) as whole milliseconds, rounded up; refused (a
    :class:`ConfigError`) where the server would refuse it."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ConfigError(f"{what} must be a number of seconds, got {seconds!r}")
    check_seconds(seconds, what, positive)
    ms = math.ceil(seconds * 1000)
    most = _limit("max_ms") if most_ms is None else most_ms
    if ms > most:
        raise ConfigError(f"{what} must be at most {most / 1000:g} s, got {seconds}")
    return ms


def check_seconds(seconds: float, what: str, positive: bool = False) -> float:
    """A number of seconds: finite, at least 0 (above 0 where `positive`); else a
    :class:`ConfigError` naming `what`."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ConfigError(f"{what} must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds <= 0):
        raise ConfigError(f"{what} must be a finite number of seconds "
                          f"{'above' if positive else 'from'} 0, got {seconds}")
    return seconds


def check_timeout(timeout: float | None) -> float | None:
    """An acquire's time-out: None (no limit) or finite seconds >= 0; a negative, NaN or
    infinite one is refused where it is given, before anything is sent."""
    return None if timeout is None else check_seconds(timeout, "timeout")


def lease_ms(lease: float) -> int:
    return to_ms(lease, "lease", positive=True)


def wait_ms(timeout: float | None) -> int | None:
    """The WAIT argument for a time-out: None waits without limit (``WAIT 0``), 0 or less
    does not wait (no WAIT), anything else waits that long (at least 1 ms)."""
    if timeout is None:
        return 0
    if timeout <= 0:
        return None
    return max(1, min(math.ceil(timeout * 1000), _limit("max_ms")))


@dataclass(frozen=True)
class Request:
    """One acquire: everything but the owner and the wait."""

    kind: Kind
    key: str
    lease_ms: int
    fence: bool = False
    lock_delay_ms: int | None = None
    capacity: int = 0
    count: int = 1

    def command(self, owner: str, wait: int | None, bind_ms: int | None) -> list[Arg]:
        args: list[Arg]
        if self.kind == "lock":
            args = ["DLOCK.ACQUIRE", self.key, owner, self.lease_ms]
        elif self.kind == "semaphore":
            args = ["DLOCK.SEMAPHORE", self.key, owner, self.capacity, self.lease_ms]
            if self.count != 1:
                args += ["COUNT", self.count]
        else:
            args = ["DLOCK.RWLOCK", self.key, owner, self.kind.upper(), self.lease_ms]
        if wait is not None:
            args += ["WAIT", wait]
        if self.fence:
            args.append("FENCE")
        if bind_ms is not None:
            args += bind_args(bind_ms, self.lease_ms)
        if self.lock_delay_ms is not None:
            args += ["LOCKDELAY", self.lock_delay_ms]
        return args

    def read_mode(self) -> Request:
        """The READ side of a read-write lock's request (LOCKDELAY is for WRITE only)."""
        return replace(self, kind="read", lock_delay_ms=None)

    def with_count(self, count: int) -> Request:
        """A semaphore request for `count` permits."""
        return replace(self, count=check_count(count, "count"))

    def release_command(self, owner: str) -> list[Arg]:
        args: list[Arg] = ["DLOCK.RELEASE", self.key, owner]
        if self.kind in ("read", "write"):
            args.append(self.kind.upper())
        elif self.kind == "semaphore" and self.count != 1:
            args += ["COUNT", self.count]
        return args

    def parse_grant(self, reply: Any) -> tuple[int, int | None] | None:
        """(hold count or permits, fencing token) of a grant; None when not granted."""
        if reply is None:
            return None
        if self.fence:
            count, token = reply
            return int(count), int(token)
        return int(reply), None


def _delay_ms(lock_delay: float | None) -> int | None:
    if lock_delay is None:
        return None
    return to_ms(lock_delay, "lock_delay", most_ms=_limit("max_lock_delay_ms"))


def _name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a lock's name must be a non-empty str, got {name!r}")
    return name


def lock_request(name: str, lease: float, fence: bool, lock_delay: float | None) -> Request:
    return Request("lock", _name(name), lease_ms(lease), fence, _delay_ms(lock_delay))


def rwlock_request(name: str, lease: float, fence: bool, lock_delay: float | None) -> Request:
    """The WRITE request; :meth:`Request.read_mode` gives the READ one."""
    return Request("write", _name(name), lease_ms(lease), fence, _delay_ms(lock_delay))


def check_count(count: int | None, what: str) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not \
            1 <= count <= _limit("max_capacity"):
        raise ConfigError(f"{what} must be an int from 1 to {_limit('max_capacity')}, "
                          f"got {count!r}")
    return count


def semaphore_request(name: str, capacity: int | None, lease: float) -> Request:
    return Request("semaphore", _name(name), lease_ms(lease),
                   capacity=check_count(capacity, "capacity"))


def renew_command(key: str, owner: str, lease_ms: int, bind_ms: int | None) -> list[Arg]:
    args: list[Arg] = ["DLOCK.RENEW", key, owner, lease_ms]
    if bind_ms is not None:
        args += bind_args(bind_ms, lease_ms)
    return args


MODULE_BIND_MS = 2000
"""The module's grace for a bare ``BIND``: 2 s, or the lease when shorter."""


def bind_args(bind_ms: int, lease_ms: int) -> list[Arg]:
    """``BIND grace-ms`` (the grace at most the lease), or a bare ``BIND`` where that is the
    module's default grace: the default then costs the server no number to read."""
    grace = min(bind_ms, lease_ms)
    return ["BIND"] if grace == min(MODULE_BIND_MS, lease_ms) else ["BIND", grace]


def is_unknown_option(error: BaseException) -> bool:
    """The reply of a module that does not know an option we sent (BIND, LOCKDELAY): a syntax
    error, or an arity error for DLOCK.RENEW, whose arity is fixed on such modules."""
    if not isinstance(error, rexc.ResponseError):
        return False
    text = str(error)
    return text.startswith("syntax error") or text.startswith("wrong number of arguments")


def is_module_missing(error: BaseException) -> bool:
    """``ERR unknown command 'DLOCK....'``: the server has no dlock module. Any other error
    (WRONGTYPE, NOPERM) still proves the command exists."""
    text = str(error)
    return text.lower().startswith("unknown command") and "dlock." in text.lower()


def translate(error: BaseException, server: str) -> BaseException:
    """A redis-py exception as this package's exception naming the server; others as they are."""
    if isinstance(error, DlockError):
        return error
    text = str(error)
    out: DlockError
    if isinstance(error, rexc.TimeoutError):
        out = ResponseTimeoutError(f"no answer from {server} in time: {text}", server)
    elif isinstance(error, rexc.ConnectionError):
        out = ServerConnectionError(f"cannot reach {server}: {text}", server)
    elif isinstance(error, rexc.ResponseError):
        if is_module_missing(error):
            out = ModuleNotLoadedError(f"dlock module not loaded on {server}", server)
        elif text.startswith("WRONGTYPE"):
            out = WrongTypeError(f"{server}: {text}", server)
        elif text.startswith("DEADLOCK"):
            out = DeadlockError(f"{server}: {text}", server)
        else:
            out = CommandError(f"{server}: {text}", server)
    else:
        return error
    out.__cause__ = error
    return out


def not_supported(option: str, server: str) -> NotSupportedError:
    return NotSupportedError(
        f"the dlock module on {server} does not support {option} (upgrade the module)", server
    )


def script_unsupported(what: str, server: str) -> NotSupportedError:
    return NotSupportedError(
        f"{what} is not available on the script backend ({server} has no dlock module)", server)


def server_name(connection_kwargs: Mapping[str, Any], service: str | None = None) -> str:
    """How errors name the server: host:port, a Unix socket path, or a Sentinel service."""
    if service is not None:
        return f"sentinel service {service}"
    if "path" in connection_kwargs:
        return str(connection_kwargs["path"])
    return f"{connection_kwargs.get('host', 'localhost')}:{connection_kwargs.get('port', 6379)}"


@dataclass(frozen=True)
class Holder:
    """One row of ``DLOCK.INFO``'s holders."""

    owner: str
    mode: str  # exclusive, read, write or permits
    count: int  # hold count, or permits held
    lease_ms: int  # this holder's remaining lease


@dataclass(frozen=True)
class LockInfo:
    """``DLOCK.INFO key`` as a value."""

    kind: str  # lock, rwlock, semaphore or none
    mode: str | None
    lease_ms: int  # remaining TTL of the key: -1 no expiry, -2 no key
    holders: tuple[Holder, ...]
    waiters: int
    fence: int | None
    capacity: int | None = None  # semaphores only
    available: int | None = None  # semaphores only
    delay_ms: int | None = None  # lock-delay left, where the module reports it


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def parse_info(reply: Any) -> LockInfo:
    """A map (RESP3) or a flat field/value array (RESP2)."""
    fields: dict[str, Any]
    if isinstance(reply, dict):
        fields = {_text(k): v for k, v in reply.items()}
    else:
        fields = {_text(k): v for k, v in zip(reply[::2], reply[1::2], strict=False)}
    holders = tuple(
        Holder(_text(o), _text(m), int(c), int(lease)) for o, m, c, lease in fields["holders"]
    )
    mode = fields.get("mode")
    return LockInfo(
        kind=_text(fields["kind"]),
        mode=None if mode is None else _text(mode),
        lease_ms=int(fields["lease-ms"]),
        holders=holders,
        waiters=int(fields["waiters"]),
        fence=_opt_int(fields.get("fence")),
        capacity=_opt_int(fields.get("capacity")),
        available=_opt_int(fields.get("available")),
        delay_ms=_opt_int(fields.get("delay-ms")),
    )


@dataclass(frozen=True)
class Waiter:
    """One row of ``DLOCK.WAITERS key``, in FIFO order."""

    owner: str
    request: str  # lock, read, write or permits:<n>
    waited_ms: int
    timeout_left_ms: int  # -1 for a wait without limit


def parse_waiters(reply: Sequence[Any]) -> list[Waiter]:
    return [Waiter(_text(o), _text(r), int(w), int(t)) for o, r, w, t in reply]


def waiters_command(key: str, count: int | None) -> list[Arg]:
    args: list[Arg] = ["DLOCK.WAITERS", key]
    return args if count is None else args + ["COUNT", count]


def opt_ms(seconds: float | None, what: str) -> int | None:
    return None if seconds is None else to_ms(seconds, what, positive=True)


def give_back_command(info: LockInfo, owner: str, request: Request,
                      before: int) -> list[Arg] | None:
    """The RELEASE that gives back what a request cut short was granted: what `owner` holds
    on the key in the request's kind beyond `before` (hold counts, or permits); None when
    it was granted nothing."""
    mode = {"lock": "exclusive", "semaphore": "permits"}.get(request.kind, request.kind)
    excess = sum(h.count for h in info.holders if h.owner == owner and h.mode == mode) - before
    if excess <= 0:
        return None
    return replace(request, count=excess).release_command(owner)


def first_unknown_option(replies: list[Any]) -> BaseException | None:
    """In a pipeline's replies, an error saying the module does not know an option."""
    return next((r for r in replies if isinstance(r, Exception) and is_unknown_option(r)), None)


class BindSupport:
    """Whether to send ``BIND``: learnt from the first command that carries it (a module
    without it answers a syntax or arity error, and the command is sent again without)."""

    def __init__(self, grace_ms: int | None) -> None:
        self.grace_ms = grace_ms
        self.supported: bool | None = None if grace_ms is not None else False

    def arg(self) -> int | None:
        return None if self.supported is False else self.grace_ms

    def accepted(self, sent: int | None) -> None:
        if sent is not None:
            self.supported = True

    def retry_without(self, error: BaseException, sent: int | None) -> bool:
        if sent is not None and not self.supported and is_unknown_option(error):
            self.supported = False
            return True
        return False


def check_options(error: BaseException, request: Request | None, server: str) -> None:
    """A LOCKDELAY the module does not know is an error of its own, not a syntax error."""
    if request is not None and request.lock_delay_ms is not None and is_unknown_option(error):
        raise not_supported("LOCKDELAY", server) from error
