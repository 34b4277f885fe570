"""The pure parts: arguments, replies, BIND learning, the watchdog's bookkeeping."""

from __future__ import annotations

import time

import redis.exceptions as rexc

from dlock_client._holds import Registry
from dlock_client._protocol import (
    BindSupport,
    Holder,
    LockInfo,
    Request,
    first_unknown_option,
    give_back_command,
    parse_info,
    renew_command,
    wait_ms,
)
from dlock_client._sync import Lost


def test_wait_argument() -> None:
    assert wait_ms(None) == 0  # WAIT 0: no limit
    assert wait_ms(0) is None and wait_ms(-1) is None  # no WAIT
    assert wait_ms(0.0001) == 1 and wait_ms(1.5) == 1500


def test_commands() -> None:
    r = Request("lock", "k", 30000, fence=True, lock_delay_ms=500)
    assert r.command("o", 0, 2000) == ["DLOCK.ACQUIRE", "k", "o", 30000, "WAIT", 0, "FENCE",
                                       "BIND", "LOCKDELAY", 500]  # the module's default grace
    assert r.command("o", None, 300) == ["DLOCK.ACQUIRE", "k", "o", 30000, "FENCE", "BIND", 300,
                                         "LOCKDELAY", 500]
    assert renew_command("k", "o", 30000, 2000) == ["DLOCK.RENEW", "k", "o", 30000, "BIND"]
    assert renew_command("k", "o", 1000, 2000) == ["DLOCK.RENEW", "k", "o", 1000, "BIND"]
    assert renew_command("k", "o", 1000, 500) == ["DLOCK.RENEW", "k", "o", 1000, "BIND", 500]
    assert r.read_mode().command("o", None, None) == ["DLOCK.RWLOCK", "k", "o", "READ", 30000,
                                                      "FENCE"]
    s = Request("semaphore", "s", 1000, capacity=3).with_count(2)
    assert s.command("o", 5, 5000) == ["DLOCK.SEMAPHORE", "s", "o", 3, 1000, "COUNT", 2,
                                       "WAIT", 5, "BIND"]  # the default: at most the lease
    assert s.release_command("o") == ["DLOCK.RELEASE", "s", "o", "COUNT", 2]
    assert r.parse_grant([2, 7]) == (2, 7) and r.parse_grant(None) is None


def test_bind_support_is_learnt_once() -> None:
    b = BindSupport(2000)
    unknown = rexc.ResponseError("syntax error")
    assert b.arg() == 2000
    assert b.retry_without(unknown, 2000) is True and b.arg() is None
    other = BindSupport(2000)
    other.accepted(2000)
    assert other.retry_without(unknown, 2000) is False, "a known BIND is not dropped"
    assert BindSupport(None).arg() is None
    assert first_unknown_option([1, rexc.ResponseError(
        "wrong number of arguments for 'dlock.renew' command")]) is not None
    assert first_unknown_option([1, rexc.ResponseError("WRONGTYPE x")]) is None


def test_info_in_both_protocols() -> None:
    flat = ["kind", "lock", "mode", "exclusive", "lease-ms", 900,
            "holders", [["a:1", "exclusive", 2, 900]], "waiters", 1, "fence", None]
    info = parse_info(flat)
    assert info == parse_info(dict(zip(flat[::2], flat[1::2], strict=True)))
    assert info.holders == (Holder("a:1", "exclusive", 2, 900),) and info.fence is None


def test_give_back_what_the_cut_request_was_granted() -> None:
    info = LockInfo("semaphore", None, 100, (Holder("o", "permits", 5, 100),), 0, None, 9, 4)
    sem = Request("semaphore", "s", 1000, capacity=9).with_count(3)
    assert give_back_command(info, "o", sem, before=2) == ["DLOCK.RELEASE", "s", "o", "COUNT", 3]
    assert give_back_command(info, "o", sem, before=5) is None, "granted nothing"


class Hold:
    def __init__(self, key: str, owner: str) -> None:
        self.key, self.owner, self.kind, self.count = key, owner, "lock", 1
        self.lost = Lost()


def test_registry_renews_and_forgets() -> None:
    reg: Registry[Hold] = Registry(grace=None)
    a, b = Hold("k", "o"), Hold("k", "o")
    reg.add(a, 3000, 100.0, None, first_renewal=1.0)
    reg.add(b, 3000, 100.5, None, first_renewal=1.0)  # re-entered: one entry
    assert len(reg) == 1 and reg.due(100.9) == [] and len(reg.due(101.0)) == 1
    (entry,) = reg.due(101.0)
    reg.renewed(entry, 101.0, None)
    assert reg.next_wake(101.0, None, None) == 1.0  # lease / 3
    reg.remove(a)
    assert len(reg) == 1, "b still holds"
    assert reg.expired(104.0) == [b], "no renewal got through before the lease ended"
    assert len(reg) == 0


def test_deadline_of_a_bound_hold() -> None:
    """The earlier of lease and (last answered on its connection + grace); a sign of life on
    another connection (the same role, reconnected) does not count."""
    reg: Registry[Hold] = Registry(grace=2.0)
    h = Hold("k", "o")
    dog1, dog2 = ("dog", 1), ("dog", 2)
    reg.add(h, 30000, 100.0, dog1, first_renewal=1.0)
    assert reg.deadline_of(("k", "o")) == 102.0
    reg.answered(dog1, 101.5)
    assert reg.deadline_of(("k", "o")) == 103.5
    reg.answered(dog2, 103.0)
    assert reg.deadline_of(("k", "o")) == 103.5
    reg.rebind_on(dog2, "dog", 103.0)
    assert reg.due(103.0), "renewed at once to re-bind on the new connection"
    assert reg.expired(103.5) == [h]


def test_lost_reads_its_deadline_when_asked() -> None:
    reg: Registry[Hold] = Registry(grace=None)
    h = Hold("k", "o")
    now = time.monotonic()
    reg.add(h, 50, now, None, first_renewal=10.0)
    assert not h.lost.is_set()
    time.sleep(0.06)
    assert h.lost.is_set() and h.lost.reason == "lease_expired", "no watchdog ran"
