"""The client's logic, once, without I/O: the flows the sync and asyncio shells run.

A flow (see :mod:`._effects`) yields requests for I/O and gets their results back. Everything
that decides is here: which backend, the commands and their replies, BIND support, waits and
their one deadline, the confirmation of a waited grant, give-backs after a cut-short wait, the
watchdog's rounds, the sign of life, and the errors users see.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from typing import (Any, Callable, Dict, Generic, List, Literal, Optional, Set, Tuple, TypeVar,
                    get_args)

import redis.exceptions as rexc

from . import _scripts as scripts
from ._effects import (Call, Flow, Listen, Pipe, Refresh, Replies, Role, Sleep, Subscribe,
                       Unsubscribe)
from ._holds import Entry, HoldLike, Registry
from ._redirect import Follow, Pause, redirect_of
from ._protocol import (
    BindSupport,
    LockInfo,
    Request,
    Waiter,
    check_options,
    check_seconds,
    first_unknown_option,
    give_back_command,
    is_module_missing,
    is_unknown_option,
    new_owner_prefix,
    script_unsupported,
    opt_ms,
    parse_info,
    parse_waiters,
    renew_command,
    translate,
    wait_ms,
    waiters_command,
)
from .errors import (CommandError, ConfigError, ModuleNotLoadedError, NotHeldError,
                     RedirectedError)

T = TypeVar("T")
H = TypeVar("H", bound=HoldLike)

#: ``backend=``: the dlock module where the server has it, else the scripts ("auto"); the
#: module or an error ("native"); always the scripts ("script").
Backend = Literal["auto", "native", "script"]
BACKENDS = get_args(Backend)

#: The response time-out's default, in seconds: the Rust client's (docs/CLIENTS.md).
DEFAULT_RESPONSE_TIMEOUT = 5.0

#: The package's logger: the first fallback to the script backend is a warning there.
log = logging.getLogger("dlock_client")
_fallbacks_logged: Set[str] = set()  # servers whose fallback was logged (once per process)
_fallbacks_lock = threading.Lock()


def check_client(bind: Optional[float], response_timeout: float, backend: Any) -> None:
    """A client's options, refused (ConfigError) before anything is opened or sent."""
    if backend not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    opt_ms(bind, "bind")
    check_seconds(response_timeout, "response_timeout", positive=True)


def timed_out(error: BaseException) -> bool:
    """The server did not answer in time: nothing more is sent to it for this call (a
    give-back would wait another response time-out; the closed connection, BIND's grace or
    the lease frees what a cut-short request may have been granted)."""
    return isinstance(error, rexc.TimeoutError)

#: Makes a hold object of the shell's kind: (request, owner, count, token).
MakeHold = Callable[[Request, str, int, Optional[int]], H]


class Core(Generic[H]):
    """The state of one client: its owner ids' prefix, the backend, what BIND support was
    learnt, and the registry of holds (with their deadlines) the watchdog renews."""

    def __init__(self, server: str, bind: Optional[float], backend: Backend,
                 response_timeout: float = DEFAULT_RESPONSE_TIMEOUT) -> None:
        check_client(bind, response_timeout, backend)
        self.server = server
        self.prefix = new_owner_prefix()
        self.response_timeout = response_timeout
        grace_ms = opt_ms(bind, "bind")
        # Learnt per command: a module may know BIND on its grants before DLOCK.RENEW has it.
        self.bind = BindSupport(grace_ms)
        self.bind_renew = BindSupport(grace_ms)
        self.registry: Registry[H] = Registry(None if grace_ms is None else grace_ms / 1000)
        self.backend = backend
        self.native: Optional[bool] = {"native": True, "script": False}.get(backend)
        self._detected = backend == "script"
        self._links = itertools.count(1)
        self.dog_sleeps_until = -math.inf  # monotonic time the watchdog wakes by itself
        # The watchdog's connections' links, once they answered: one, or one per node of a
        # Redis Cluster (keyed by what a link says besides its epoch).
        self.dog_links: Dict[Any, Any] = {}
        #: Set by a shell serving a Redis Cluster: waits and renewals follow its redirects.
        self.cluster = False

    # -- helpers ------------------------------------------------------------------------

    def translating(self, flow: Flow[T]) -> Flow[T]:
        """Runs `flow`, raising redis-py's errors as this package's (the cause kept)."""
        try:
            return (yield from flow)
        except rexc.RedisError as error:
            out = translate(error, self.server)
            if out is error:
                raise
            raise out from error

    def new_link(self, role: Role) -> Tuple[Role, int]:
        """A link for a connection the core does not follow after this command (a pooled one)."""
        return (role, next(self._links))

    @property
    def ping_interval(self) -> Optional[float]:
        """The sign of life on the watchdog's connection, where holds are bound to it."""
        grace = self.registry.grace
        return None if grace is None or not self.bind_renew.supported else grace / 3

    # -- the backend --------------------------------------------------------------------

    def detect(self) -> Flow[bool]:
        """Whether the native backend serves this client (asked once: ``DLOCK.INFO`` answers
        anything but ``unknown command`` where the module is loaded)."""
        if self._detected:
            return bool(self.native)
        try:
            yield Call(Role.CMD, ["DLOCK.INFO", "dlock:probe"])
            has = True
        except rexc.ResponseError as error:
            has = not is_module_missing(error)
        if self.backend == "native" and not has:
            raise ModuleNotLoadedError(f"dlock module not loaded on {self.server}", self.server)
        if not has:
            self._log_fallback()
        self.native = has
        self._detected = True
        return has

    def _log_fallback(self) -> None:
        """The first fallback to the scripts for a server: one warning per process."""
        with _fallbacks_lock:
            if self.server in _fallbacks_logged:
                return
            _fallbacks_logged.add(self.server)
        log.warning("dlock module not loaded on %s: using Redisson's Lua scripts (no FIFO "
                    "order, fencing tokens or BIND; backend=\"script\" says so and logs "
                    "nothing)", self.server)

    def _check_backend(self, request: Request) -> Flow[bool]:
        native = yield from self.detect()
        if not native:
            if request.fence:
                raise script_unsupported("fencing tokens (fence=True)", self.server)
            if request.lock_delay_ms is not None:
                raise script_unsupported("lock_delay", self.server)
        return native

    # -- acquiring ----------------------------------------------------------------------

    def acquire(self, request: Request, owner: str, timeout: Optional[float],
                make: MakeHold[H]) -> Flow[Optional[H]]:
        """Wait for a grant: without limit (None), not at all (<= 0), or `timeout` seconds in
        all. A grant whose lease may already be near its end (its lease began at an unknown
        moment of a long wait) is confirmed before it is returned; one the confirmation finds
        gone is asked for again within the same deadline."""
        return self.translating(self._acquire(request, owner, timeout, make))

    def _acquire(self, request: Request, owner: str, timeout: Optional[float],
                 make: MakeHold[H]) -> Flow[Optional[H]]:
        native = yield from self._check_backend(request)
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if native:
                got = yield from self._try_native(request, owner, left)
            else:
                got = yield from self._try_scripts(request, owner, left)
            if got is None:
                return None
            count, token, sent, link = got
            held = make(request, owner, count, token)
            entry = self.registry.add(held, request.lease_ms, sent, link,
                                      self._first_renewal(request), count_holds=count == 0)
            if time.monotonic() < entry.next_due:
                return held
            # Already due: the wait outlasted the time a renewal is allowed to wait.
            try:
                confirmed = yield from self._confirm(entry)
            except BaseException as error:
                self.registry.remove(held)
                if not timed_out(error):
                    yield from self._release_quietly(held, request)
                raise
            if confirmed:
                return held
            held.lost._fire("not_held")
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _first_renewal(self, request: Request) -> float:
        """Seconds from a grant's send time to its first renewal: a third of the lease, and
        with BIND within half the grace (the grant bound the hold to a pooled connection; the
        watchdog's RENEW ... BIND re-binds it to its own)."""
        first = request.lease_ms / 3000
        grace = self.bind.arg()
        if self.bind.supported and grace is not None:
            first = min(first, min(grace, request.lease_ms) / 2000)
        return first

    def _try_native(self, request: Request, owner: str, left: Optional[float]
                    ) -> Flow[Optional[Tuple[int, Optional[int], float, Any]]]:
        wait = wait_ms(left)
        role = Role.CMD if wait is None else Role.WAIT
        before = self.registry.held(request.key, owner, request.kind)
        sent = time.monotonic()
        try:
            reply, bind = yield from self._with_bind(
                lambda bind: self._acquire_call(request, owner, left, wait, bind),
                request, self.bind)
        except rexc.ResponseError:
            raise
        except BaseException as error:
            # A wait cut short (cancelled, KeyboardInterrupt, a lost connection): the shell's
            # redis-py closed its connection, so the server drops the waiter; a grant made
            # just before is given back (not to a server that stopped answering).
            if not timed_out(error):
                yield from self._give_back(request, owner, before)
            raise
        grant = request.parse_grant(reply)
        if grant is None:
            return None
        link = None if bind is None else self.new_link(role)
        return grant[0], grant[1], sent, link

    def _acquire_call(self, request: Request, owner: str, left: Optional[float],
                      wait: Optional[int], bind: Optional[int]) -> Flow[Any]:
        """The acquire command; a waiting one on a cluster follows the redirects of a reshard
        (see :mod:`._redirect`) within what is left of the wait: None when that ran out
        between tries (not granted)."""
        if wait is None or not self.cluster:
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
            if isinstance(step, Pause):
                yield Sleep(step.seconds)
            elif step.moved:
                yield Refresh()

    def _reply_within(self, wait: Optional[int]) -> Optional[float]:
        """How long a WAIT's reply may take: the wait plus one response time-out (``WAIT 0``,
        without limit: no bound)."""
        return None if not wait else wait / 1000 + self.response_timeout

    def _with_bind(self, op: Callable[[Optional[int]], Flow[Any]], request: Optional[Request],
                   support: BindSupport) -> Flow[Tuple[Any, Optional[int]]]:
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

    def _try_scripts(self, request: Request, owner: str, left: Optional[float]
                     ) -> Flow[Optional[Tuple[int, Optional[int], float, Any]]]:
        """Redisson's ``tryLock(waitTime, leaseTime)``: try; subscribe to the unlock channel;
        try again on each unlock message or after the holders' remaining lease, until the
        deadline (one last try at the deadline)."""
        deadline = None if left is None else time.monotonic() + left
        before = self.registry.held(request.key, owner, request.kind)
        got = yield from self._script_try(request, owner, before)
        if got is not None or (deadline is not None and time.monotonic() >= deadline):
            return got
        handle = yield from self._subscribe(scripts.channel(request.key), request.key)
        try:
            while True:
                sent = time.monotonic()
                granted, n = yield from self._script_try_once(request, owner, before)
                if granted:
                    return self._script_grant(request, before, n, sent)
                now = time.monotonic()
                until = deadline
                if n >= 0:
                    until = min(until if until is not None else math.inf, now + n / 1000)
                if handle is None:  # no pub/sub: poll
                    until = min(until if until is not None else math.inf, now + 0.1)
                yield from self._listen(handle, None if until is None else max(0.0, until - now))
                if deadline is not None and time.monotonic() >= deadline:
                    return (yield from self._script_try(request, owner, before))
        finally:
            if handle is not None:
                yield Unsubscribe(handle)

    def _subscribe(self, channel: str, key: str) -> Flow[Any]:
        """A subscription to `channel`, once the server confirmed it (so a message published
        after this returns is seen); None when pub/sub is unavailable (the caller polls)."""
        handle = None
        try:
            handle = yield Subscribe(channel, key)
            end = time.monotonic() + self.response_timeout
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

    def _listen(self, handle: Any, timeout: Optional[float]) -> Flow[bool]:
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

    def _script_try(self, request: Request, owner: str, before: int
                    ) -> Flow[Optional[Tuple[int, Optional[int], float, Any]]]:
        sent = time.monotonic()
        granted, n = yield from self._script_try_once(request, owner, before)
        return self._script_grant(request, before, n, sent) if granted else None

    def _script_grant(self, request: Request, before: int, n: int, sent: float
                      ) -> Tuple[int, Optional[int], float, Any]:
        return n, None, sent, None  # n = 0: the lock script does not say the hold count

    def _script_try_once(self, request: Request, owner: str, before: int
                         ) -> Flow[Tuple[bool, int]]:
        try:
            reply = yield from self._eval(Role.CMD, scripts.try_script(request, owner))
        except rexc.ResponseError:
            raise
        except BaseException as error:
            if not timed_out(error):
                yield from self._script_give_back(request, owner, before)
            raise
        try:
            return scripts.parse_try(request, reply)
        except ValueError as error:
            raise CommandError(f"{self.server}: {error}", self.server) from None

    def _script_give_back(self, request: Request, owner: str, before: int) -> Flow[None]:
        """An attempt cut short in flight may have been granted: the lock's hash says how many
        holds the owner has; the ones beyond `before` go back. (Read-write locks and
        semaphores keep the lease as the bound of such a grant.)"""
        if request.kind != "lock":
            return
        try:
            count = yield Call(Role.CMD, ["HGET", request.key, owner], request.key, cleanup=True)
            for _ in range(int(count or 0) - before):
                yield from self._eval(Role.CMD, scripts.release_script(request, owner),
                                      cleanup=True)
        except Exception:
            pass

    def _eval(self, role: Role, script: scripts.Script, cleanup: bool = False) -> Flow[Any]:
        key = script.keys[0]
        try:
            return (yield Call(role, script.evalsha(), key, cleanup))
        except rexc.NoScriptError:
            return (yield Call(role, script.eval(), key, cleanup))

    # -- releasing and renewing ---------------------------------------------------------

    def release(self, hold: H, request: Request) -> Flow[bool]:
        """True when this released the owner's last hold (or its last permits), False when
        the owner still holds the key; :class:`NotHeldError` when the hold was lost (its
        RELEASE is sent all the same: a hold lost by its local deadline may still be on the
        server). A release that fails otherwise (no answer) leaves the hold as it was."""
        was_lost = hold.lost.is_set()
        detached = self.registry.detach(hold)
        try:
            reply = yield from self.translating(self._release(hold, request))
        except BaseException:
            self.registry.reattach(hold, detached)
            raise
        if reply is None or was_lost:  # the server says it was not held: it was lost before
            hold.lost._fire("not_held")
            raise not_held(hold, self.server)
        hold.lost._fire("released")
        return bool(reply == 1)

    def _release(self, hold: H, request: Request) -> Flow[Any]:
        if (yield from self.detect()):
            reply = yield Call(Role.CMD, request.release_command(hold.owner), hold.key)
        else:
            reply = yield from self._eval(Role.CMD, scripts.release_script(request, hold.owner))
            if isinstance(reply, list) and reply and reply[0] == -1:
                raise CommandError(
                    f"{self.server}: ERR COUNT {request.count} is more than the {reply[1]} "
                    "permits the owner holds", self.server)
        return reply

    def _release_quietly(self, hold: H, request: Request) -> Flow[None]:
        try:
            if self.native:
                yield Call(Role.CMD, request.release_command(hold.owner), hold.key, cleanup=True)
            else:
                yield from self._eval(Role.CMD, scripts.release_script(request, hold.owner),
                                      cleanup=True)
        except Exception:
            pass  # the lease (or BIND) frees it

    def renew(self, hold: H) -> Flow[bool]:
        """``held.renew()``: the lease set again now (and the hold bound to the watchdog's
        connection): True; :class:`NotHeldError` when the hold is no longer held (lost,
        released, or the server says so now)."""
        entry = None if hold.lost.is_set() else self.registry.entry(hold)
        if entry is None or not (yield from self.translating(self._confirm(entry))):
            raise not_held(hold, self.server)
        return True

    def _confirm(self, entry: Entry[H]) -> Flow[bool]:
        sent = time.monotonic()
        replies = yield from self._renew_pipe([entry])
        reply = replies.values[0]
        if isinstance(reply, BaseException) and _not_reached(reply):
            raise reply  # a cluster's node not reached: as a connection error elsewhere
        return self._apply([entry], replies, sent)[0]

    def _renew_command(self, native: bool, e: Entry[H], bind: Optional[int]) -> List[Any]:
        if native:
            return renew_command(e.key, e.owner, e.lease_ms, bind)
        return scripts.renew_script(e.kind, e.key, e.owner, e.lease_ms).evalsha()

    def _renew_pipe(self, due: List[Entry[H]], ping: bool = False) -> Flow[Replies]:
        """One pipeline of renewals (RENEW ... BIND, binding the holds to the watchdog's
        connection) on the watchdog's connection, with a PING when asked."""
        native = yield from self.detect()
        keys: List[Optional[str]] = [e.key for e in due]
        if ping:
            keys.append(None)

        def send(bind: Optional[int]) -> Pipe:
            cmds = [self._renew_command(native, e, bind) for e in due]
            return Pipe(Role.DOG, cmds + [["PING"]] if ping else cmds, keys)

        bind = self.bind_renew.arg() if native else None
        result: Replies = yield send(bind)
        unknown = first_unknown_option(result.values)
        if unknown is not None and self.bind_renew.retry_without(unknown, bind):
            bind = None
            result = yield send(None)
        if not native and any(isinstance(r, rexc.NoScriptError) for r in result.values):
            # The server forgot the scripts (restart, SCRIPT FLUSH): load them, once more.
            yield Pipe(Role.DOG, [["SCRIPT", "LOAD", scripts.text(n)]
                                  for n in ("renew", "rw_renew", "sem_renew")], [None] * 3)
            result = yield send(None)
        if self.cluster:
            result = yield from self._follow_renewals(
                due, result, lambda e: self._renew_command(native, e, bind))
        if bind is not None and not any(is_unknown_option(r) for r in result.values
                                        if isinstance(r, BaseException)):
            self.bind_renew.accepted(bind)
        for link in result.all_links():
            self.dog_links[link[1:-1]] = link  # per node, the latest connection
        return result if bind is not None else Replies(result.values, None)

    def _follow_renewals(self, due: List[Entry[H]], result: Replies,
                         command: Callable[[Entry[H]], List[Any]]) -> Flow[Replies]:
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
                    if isinstance(step, Pause):
                        yield Sleep(step.seconds)
                    elif step.moved:
                        yield Refresh()
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

    def _apply(self, due: List[Entry[H]], replies: Replies, sent: float) -> List[bool]:
        """The replies to the renewals of `due` sent at `sent`; fires ``lost`` on the holds
        the server says are gone (a reply other than 1: 0, or an error such as WRONGTYPE).
        On a cluster, a renewal whose node could not be reached, or still redirected, is
        tried again soon (the others are applied)."""
        for link in replies.all_links():
            self.registry.answered(link, sent)
        out = []
        for i, (entry, reply) in enumerate(zip(due, replies.values)):
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

    def watch_round(self) -> Flow[None]:
        """One round of the watchdog: holds past their deadline are lost; due renewals (and,
        where holds are bound to its connection and nothing else answered there lately, a
        PING) go out in one pipeline."""
        now = time.monotonic()
        for hold in self.registry.expired(now):
            hold.lost._fire("lease_expired")
        due = self.registry.due(now)
        interval = self.ping_interval
        ping = interval is not None and any(self.registry.ping_due(now, link, interval)
                                            for link in list(self.dog_links.values()))
        if not due and not ping:
            return
        sent = time.monotonic()
        try:
            # On a cluster renewals prove only their own nodes' connections: the PING goes
            # to every node's with them.
            replies = yield from self._renew_pipe(due, ping=ping and (not due or self.cluster))
        except (rexc.RedisError, OSError):  # not reached (or the module went away)
            self.registry.unreachable(due, time.monotonic())
            return
        self._apply(due, replies, sent)
        for link in list(self.dog_links.values()):
            self.registry.rebind_on(link, Role.DOG, time.monotonic())

    def next_wake(self, now: float) -> Optional[float]:
        wakes = [self.registry.next_wake(now, link, self.ping_interval)
                 for link in list(self.dog_links.values()) or [None]]
        return min((w for w in wakes if w is not None), default=None)

    def wake_for(self, hold: H) -> bool:
        """Whether the watchdog must be woken for a new hold: only when it is due before the
        watchdog wakes anyway (most acquires cost the watchdog nothing)."""
        entry = self.registry.entry(hold)
        return entry is not None and entry.next_due < self.dog_sleeps_until

    def close(self) -> None:
        """The client closed: nothing renews its holds any more, which are lost (``closed``)."""
        for hold in self.registry.clear():
            hold.lost._fire("closed")

    # -- looking -------------------------------------------------------------------------

    def waiters(self, key: str, count: Optional[int]) -> Flow[List[Waiter]]:
        return self.translating(self._native_only(
            "waiters()", Call(Role.CMD, waiters_command(key, count), key), parse_waiters))

    def info(self, key: str) -> Flow[LockInfo]:
        return self.translating(self._native_only(
            "info()", Call(Role.CMD, ["DLOCK.INFO", key], key), parse_info))

    def _native_only(self, what: str, op: Call, parse: Callable[[Any], T]) -> Flow[T]:
        if not (yield from self.detect()):
            raise script_unsupported(what, self.server)
        return parse((yield op))



def not_held(hold: HoldLike, server: str) -> NotHeldError:
    """The answer to the release of a hold no longer held (released, or lost)."""
    why = "released already" if hold.lost.reason == "released" else \
        f"lost: {hold.lost.reason}"
    return NotHeldError(f"{hold.key!r} is not held by {hold.owner} any more ({why})", server)


def _not_reached(reply: Any) -> bool:
    """A renewal's value that says nothing about the hold: its node could not be reached (a
    cluster's shell answers a node's commands so), or it was still redirected."""
    if isinstance(reply, (rexc.ConnectionError, rexc.TimeoutError, OSError, RedirectedError)):
        return True
    return isinstance(reply, rexc.ResponseError) and redirect_of(reply) is not None
