"""The two ways to take a lock, one interface: the dlock module's commands (:class:`Native`:
one ``WAIT`` queued FIFO in the server, on a connection of its own) and Redisson's Lua scripts
on a server without the module (:class:`Script`: try, then wait for the unlock message or the
holders' lease, and try again). :func:`probe` finds which one serves a client.

Sans-I/O, as :mod:`._client`: every method is a flow (:mod:`._effects`) or a pure function.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import redis.exceptions as rexc

from . import _scripts as scripts
from ._effects import Call, Flow, Listen, Pipe, Role, Sleep, Subscribe, Unsubscribe
from ._protocol import (
    BindSupport,
    LockInfo,
    Request,
    Waiter,
    check_options,
    give_back_command,
    is_module_missing,
    parse_info,
    parse_waiters,
    renew_command,
    script_unsupported,
    wait_ms,
    waiters_command,
)
from ._redirect import Follow
from .errors import CommandError, ModuleNotLoadedError

if TYPE_CHECKING:
    from ._holds import Entry, Registry

T = TypeVar("T")

#: The package's logger: the first fallback to the script backend is a warning there.
log = logging.getLogger("dlock_client")
_fallbacks_logged: set[str] = set()  # servers whose fallback was logged (once per process)
_fallbacks_lock = threading.Lock()


@dataclass(frozen=True)
class Grant:
    """What an acquire was granted: the hold count (0: the script did not say), the fencing
    token, when the command that set the lease was sent, and the connection the hold is
    bound to (BIND; None: not bound)."""

    count: int
    token: int | None
    sent: float
    link: Any


def timed_out(error: BaseException) -> bool:
    """The server did not answer in time: nothing more is sent to it for this call (a
    give-back would wait another response time-out; the closed connection, BIND's grace or
    the lease frees what a cut-short request may have been granted)."""
    return isinstance(error, rexc.TimeoutError)


def given_back_if_cut(flow: Flow[T], give_back: Callable[[], Flow[None]]) -> Flow[T]:
    """Runs `flow`, a request that may be granted. Cut short in flight (cancelled, a lost
    connection: anything but an error reply), what it may have been granted just before is
    given back with `give_back` (not to a server that stopped answering: :func:`timed_out`),
    and the error raised."""
    try:
        return (yield from flow)
    except rexc.ResponseError:
        raise
    except BaseException as error:
        if not timed_out(error):
            yield from give_back()
        raise


class ClientState(Protocol):
    """What a backend reads of its client's state (:class:`._client.ClientCore` is one; this
    module does not import it, which imports this one)."""

    @property
    def server(self) -> str: ...
    @property
    def response_timeout(self) -> float: ...
    @property
    def bind(self) -> BindSupport: ...
    @property
    def registry(self) -> Registry[Any]: ...
    @property
    def cluster(self) -> bool: ...
    def new_link(self, role: Role) -> tuple[Role, int]: ...


class BackendBase:
    """What the client asks of a backend; `client` is the client's state (its server, what
    it holds, what BIND support it learnt)."""

    native: bool

    def __init__(self, client: ClientState) -> None:
        self.client = client

    @property
    def server(self) -> str:
        return self.client.server

    def check(self, request: Request) -> None:
        """Refuses (NotSupportedError) what this backend cannot do, before anything is sent."""

    def try_acquire(self, request: Request, owner: str, left: float | None
                    ) -> Flow[Grant | None]:
        """One acquire: without limit (`left` None), not at all (0) or within `left` seconds;
        None when not granted in time."""
        raise NotImplementedError

    def release(self, request: Request, owner: str, cleanup: bool = False) -> Flow[Any]:
        """Gives one hold (or the request's permits) back: the reply (None: not held)."""
        raise NotImplementedError

    def renew_command(self, entry: Entry[Any], bind: int | None) -> list[Any]:
        raise NotImplementedError

    def reload(self, values: list[Any]) -> Pipe | None:
        """What to send before renewals answered with `values` are sent again (None: no need)."""
        return None

    def waiters(self, key: str, count: int | None) -> Flow[list[Waiter]]:
        raise script_unsupported("waiters()", self.server)

    def info(self, key: str) -> Flow[LockInfo]:
        raise script_unsupported("info()", self.server)

    def release_quietly(self, request: Request, owner: str) -> Flow[None]:
        """:meth:`release` as a clean-up: a failure is left to the lease (or BIND)."""
        try:
            yield from self.release(request, owner, cleanup=True)
        except Exception:
            pass


class Native(BackendBase):
    """The dlock module's ``DLOCK.*`` commands."""

    native = True

    def try_acquire(self, request: Request, owner: str, left: float | None
                    ) -> Flow[Grant | None]:
        client = self.client
        wait = wait_ms(left)
        role = Role.CMD if wait is None else Role.WAIT
        before = client.registry.held(request.key, owner, request.kind)
        sent = time.monotonic()
        # A wait cut short (cancelled, KeyboardInterrupt, a lost connection): the shell's
        # redis-py closed its connection, so the server drops the waiter.
        reply, bind = yield from given_back_if_cut(
            self._with_bind(lambda bind: self._acquire_call(request, owner, left, wait, bind),
                            request, client.bind),
            lambda: self._give_back(request, owner, before))
        grant = request.parse_grant(reply)
        if grant is None:
            return None
        link = None if bind is None else client.new_link(role)
        return Grant(grant[0], grant[1], sent, link)

    def _acquire_call(self, request: Request, owner: str, left: float | None,
                      wait: int | None, bind: int | None) -> Flow[Any]:
        """The acquire command; a waiting one on a cluster follows the redirects of a reshard
        (see :mod:`._redirect`) within what is left of the wait: None when that ran out
        between tries (not granted)."""
        if wait is None or not self.client.cluster:
            role = Role.CMD if wait is None else Role.WAIT
            return (yield Call(role, request.command(owner, wait, bind), request.key,
                               reply_within=self._reply_within(wait)))
        deadline = None if left is None else time.monotonic() + left
        follow = Follow(request.key, deadline, waits=True)
        while True:
            t = follow.next_try()
            if t is None:
                return None
            try:
                return (yield Call(Role.WAIT, request.command(owner, t.wait_ms, bind),
                                   request.key, node=t.addr, asking=t.asking,
                                   reply_within=self._reply_within(t.wait_ms)))
            except rexc.ResponseError as error:
                step = follow.after(error)
                if step is None:
                    raise
            yield from step.effects()

    def _reply_within(self, wait: int | None) -> float | None:
        """How long a WAIT's reply may take: the wait plus one response time-out (``WAIT 0``,
        without limit: no bound)."""
        return None if not wait else wait / 1000 + self.client.response_timeout

    def _with_bind(self, op: Callable[[int | None], Flow[Any]], request: Request | None,
                   support: BindSupport) -> Flow[tuple[Any, int | None]]:
        """Sends with BIND where the module supports it; (reply, the grace sent or None)."""
        bind = support.arg()
        try:
            result = yield from op(bind)
        except rexc.ResponseError as error:
            if not support.retry_without(error, bind):
                check_options(error, request, self.server)
                raise
            bind = None
            try:
                result = yield from op(None)
            except rexc.ResponseError as error2:
                check_options(error2, request, self.server)
                raise
        support.accepted(bind)
        return result, bind

    def _give_back(self, request: Request, owner: str, before: int) -> Flow[None]:
        """After a cut-short wait: once the server has dropped the waiter, release whatever
        that request was granted (what the owner holds beyond what it held before)."""
        try:
            until = time.monotonic() + 2.0
            while time.monotonic() < until:
                rows = yield Call(Role.CMD, waiters_command(request.key, None), request.key,
                                  cleanup=True)
                if not any(w.owner == owner for w in parse_waiters(rows)):
                    break
                yield Sleep(0.002, cleanup=True)
            info = parse_info((yield Call(Role.CMD, ["DLOCK.INFO", request.key], request.key,
                                          cleanup=True)))
            give = give_back_command(info, owner, request, before)
            if give is not None:
                yield Call(Role.CMD, give, request.key, cleanup=True)
        except Exception:
            pass  # the server is gone too: the lease (or BIND) frees it

    def release(self, request: Request, owner: str, cleanup: bool = False) -> Flow[Any]:
        return (yield Call(Role.CMD, request.release_command(owner), request.key, cleanup))

    def renew_command(self, entry: Entry[Any], bind: int | None) -> list[Any]:
        return renew_command(entry.key, entry.owner, entry.lease_ms, bind)

    def waiters(self, key: str, count: int | None) -> Flow[list[Waiter]]:
        return parse_waiters((yield Call(Role.CMD, waiters_command(key, count), key)))

    def info(self, key: str) -> Flow[LockInfo]:
        return parse_info((yield Call(Role.CMD, ["DLOCK.INFO", key], key)))


class Script(BackendBase):
    """Redisson's Lua scripts (no FIFO order, fencing tokens, lock-delay or BIND)."""

    native = False

    def check(self, request: Request) -> None:
        if request.fence:
            raise script_unsupported("fencing tokens (fence=True)", self.server)
        if request.lock_delay_ms is not None:
            raise script_unsupported("lock_delay", self.server)

    def try_acquire(self, request: Request, owner: str, left: float | None
                    ) -> Flow[Grant | None]:
        """Redisson's ``tryLock(waitTime, leaseTime)``: try; subscribe to the unlock channel;
        try again on each unlock message or after the holders' remaining lease, until the
        deadline (one last try at the deadline)."""
        deadline = None if left is None else time.monotonic() + left
        before = self.client.registry.held(request.key, owner, request.kind)
        got, _ = yield from self._try(request, owner, before)
        if got is not None or (deadline is not None and time.monotonic() >= deadline):
            return got
        handle = yield from self._subscribe(scripts.channel(request.key), request.key)
        try:
            while True:
                got, retry_ms = yield from self._try(request, owner, before)
                if got is not None:
                    return got
                now = time.monotonic()
                until = math.inf if deadline is None else deadline
                if retry_ms >= 0:
                    until = min(until, now + retry_ms / 1000)
                if handle is None:  # no pub/sub: poll
                    until = min(until, now + 0.1)
                yield from self._listen(handle, None if until == math.inf
                                        else max(0.0, until - now))
                if deadline is not None and time.monotonic() >= deadline:
                    return (yield from self._try(request, owner, before))[0]
        finally:
            if handle is not None:
                yield Unsubscribe(handle)

    def _subscribe(self, channel: str, key: str) -> Flow[Any]:
        """A subscription to `channel`, once the server confirmed it (so a message published
        after this returns is seen); None when pub/sub is unavailable (the caller polls)."""
        handle = None
        try:
            handle = yield Subscribe(channel, key)
            end = time.monotonic() + self.client.response_timeout
            while time.monotonic() < end:
                msg = yield Listen(handle, end - time.monotonic())
                if msg is not None and msg["type"] == "subscribe":
                    return handle
        except (rexc.ConnectionError, rexc.TimeoutError):
            pass
        except BaseException:  # cancelled, closed: the subscription goes too
            if handle is not None:
                yield Unsubscribe(handle)
            raise
        if handle is not None:
            yield Unsubscribe(handle)
        return None

    def _listen(self, handle: Any, timeout: float | None) -> Flow[bool]:
        """Waits up to `timeout` seconds (None: without limit) for a message on the channel;
        True when one came. Without a subscription, sleeps the time."""
        if handle is None:
            yield Sleep(timeout or 0.0)
            return False
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            msg = yield Listen(handle, left)
            if msg is not None and msg["type"] == "message":
                return True
            if end is not None and time.monotonic() >= end:
                return False

    def _try(self, request: Request, owner: str, before: int
             ) -> Flow[tuple[Grant | None, int]]:
        """One try: (the grant, 0), or (None, ms until the holders' lease ends; -1: the key
        has no expiry)."""
        sent = time.monotonic()
        reply = yield from given_back_if_cut(self._eval(scripts.try_script(request, owner)),
                                             lambda: self._give_back(request, owner, before))
        try:
            granted, n = scripts.parse_try(request, reply)
        except ValueError as error:
            raise CommandError(f"{self.server}: {error}", self.server) from None
        if not granted:
            return None, n
        return Grant(n, None, sent, None), 0  # n = 0: the lock script does not say the count

    def _give_back(self, request: Request, owner: str, before: int) -> Flow[None]:
        """An attempt cut short in flight may have been granted: the lock's hash says how many
        holds the owner has; the ones beyond `before` go back. (Read-write locks and
        semaphores keep the lease as the bound of such a grant.)"""
        if request.kind != "lock":
            return
        try:
            count = yield Call(Role.CMD, ["HGET", request.key, owner], request.key, cleanup=True)
            for _ in range(int(count or 0) - before):
                yield from self._eval(scripts.release_script(request, owner), cleanup=True)
        except Exception:
            pass

    def _eval(self, script: scripts.Script, cleanup: bool = False) -> Flow[Any]:
        key = script.keys[0]
        try:
            return (yield Call(Role.CMD, script.evalsha(), key, cleanup))
        except rexc.NoScriptError:
            return (yield Call(Role.CMD, script.eval(), key, cleanup))

    def release(self, request: Request, owner: str, cleanup: bool = False) -> Flow[Any]:
        reply = yield from self._eval(scripts.release_script(request, owner), cleanup)
        if isinstance(reply, list) and reply and reply[0] == -1:
            raise CommandError(
                f"{self.server}: ERR COUNT {request.count} is more than the {reply[1]} "
                "permits the owner holds", self.server)
        return reply

    def renew_command(self, entry: Entry[Any], bind: int | None) -> list[Any]:
        return scripts.renew_script(entry.kind, entry.key, entry.owner, entry.lease_ms).evalsha()

    def reload(self, values: list[Any]) -> Pipe | None:
        """The server forgot the scripts (restart, SCRIPT FLUSH): they are loaded again."""
        if not any(isinstance(v, rexc.NoScriptError) for v in values):
            return None
        names = ("renew", "rw_renew", "sem_renew")
        return Pipe(Role.DOG, [["SCRIPT", "LOAD", scripts.text(n)] for n in names],
                    [None] * len(names))


def probe(client: ClientState, wanted: str) -> Flow[BackendBase]:
    """The backend serving `client` (``backend=`` `wanted`): ``DLOCK.INFO`` answers anything
    but ``unknown command`` where the module is loaded."""
    if wanted == "script":
        return Script(client)
    try:
        yield Call(Role.CMD, ["DLOCK.INFO", "dlock:probe"])
        has = True
    except rexc.ResponseError as error:
        has = not is_module_missing(error)
    if wanted == "native" and not has:
        raise ModuleNotLoadedError(f"dlock module not loaded on {client.server}", client.server)
    if has:
        return Native(client)
    _log_fallback(client.server)
    return Script(client)


def _log_fallback(server: str) -> None:
    """The first fallback to the scripts for a server: one warning per process."""
    with _fallbacks_lock:
        if server in _fallbacks_logged:
            return
        _fallbacks_logged.add(server)
    log.warning("dlock module not loaded on %s: using Redisson's Lua scripts (no FIFO "
                "order, fencing tokens or BIND; backend=\"script\" says so and logs "
                "nothing)", server)
