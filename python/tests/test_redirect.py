"""The rules a waiting acquire follows on a cluster (dlock_client._redirect), without a server:
which error replies are redirects, the back-off, one deadline across tries, the bound on
redirects. The cluster tests (test_cluster.py) show them against real reshards."""

from __future__ import annotations

import pytest
import redis.exceptions as rexc

import dlock_client as dl
from dlock_client._redirect import (
    MAX_REDIRECTS,
    Ask,
    Backoff,
    Follow,
    Go,
    Later,
    Moved,
    Pause,
    Try,
    redirect_of,
)


def test_redirects_of_error_replies() -> None:
    # As redis-py parses them (the code stripped off into the class) ...
    assert redirect_of(rexc.MovedError("3999 127.0.0.1:7001")) == Moved("127.0.0.1:7001")
    assert redirect_of(rexc.AskError("3999 10.0.0.2:6380")) == Ask("10.0.0.2:6380")
    assert redirect_of(rexc.TryAgainError("the cluster is changing")) == Later()
    assert redirect_of(rexc.ClusterDownError("The cluster is down")) == Later()
    # ... and as a plain error reply with its code (a parser that does not know them).
    assert redirect_of(rexc.ResponseError("MOVED 3999 127.0.0.1:7001")) == Moved("127.0.0.1:7001")
    assert redirect_of(rexc.ResponseError("ASK 3999 10.0.0.2:6380")) == Ask("10.0.0.2:6380")
    assert redirect_of(rexc.ResponseError("TRYAGAIN x")) == Later()
    assert redirect_of(rexc.ResponseError(
        "UNBLOCKED force unblock from blocking operation, instance state changed "
        "(master -> replica?)")) == Later()
    # Not redirects: CLIENT UNBLOCK ... ERROR ("stop waiting"), other errors, no target.
    assert redirect_of(rexc.ResponseError("UNBLOCKED client unblocked via CLIENT UNBLOCK")) is None
    assert redirect_of(rexc.ResponseError("ERR syntax error")) is None
    assert redirect_of(rexc.ResponseError("MOVED 3999")) is None
    assert redirect_of(rexc.ConnectionError("reset")) is None


def test_backoff_doubles_up_to_200ms_while_time_is_left() -> None:
    b = Backoff()
    assert [b.next_pause(None) for _ in range(7)] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.2, 0.2]
    b = Backoff()
    assert b.next_pause(0.015) == 0.01
    assert b.next_pause(0.015) is None  # 20 ms next, 15 ms left: the time is up
    assert Backoff().next_pause(0.0) is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_deadline_across_redirects() -> None:
    clock = Clock()
    f = Follow("k", deadline=clock.now + 5.0, waits=True, clock=clock)
    assert f.next_try() == Try(None, False, 5000)  # first: the node of the slot map
    clock.now += 2.0  # waited 2 s on the old owner, then its slot moved
    assert f.after(rexc.AskError("1 127.0.0.1:7002")) == Go("127.0.0.1:7002", moved=False)
    assert f.next_try() == Try("127.0.0.1:7002", True, 3000)  # ASKING, what is left
    clock.now += 1.0005
    assert f.after(rexc.MovedError("1 127.0.0.1:7003")) == Go("127.0.0.1:7003", moved=True)
    assert f.next_try() == Try("127.0.0.1:7003", False, 2000)  # rounded up, no ASKING
    clock.now += 2.0
    assert f.next_try() is None  # the time ran out between tries: not granted


def test_trying_again_later_stays_within_the_deadline() -> None:
    clock = Clock()
    f = Follow("k", deadline=clock.now + 0.05, waits=True, clock=clock)
    pauses: list[float] = []
    while True:
        step = f.after(rexc.TryAgainError("x"))
        if step is None:
            break  # the error is the answer once no pause fits
        assert isinstance(step, Pause)
        pauses.append(step.seconds)
        clock.now += step.seconds
    assert pauses == [0.01, 0.02]  # 40 ms would end after the deadline
    assert f.redirects == 0
    # Without limit it keeps trying, WAIT 0 each time.
    f = Follow("k", deadline=None, waits=True, clock=clock)
    assert all(isinstance(f.after(rexc.ClusterDownError("x")), Pause) for _ in range(50))
    assert f.next_try() == Try(None, False, 0)


def test_gives_up_after_a_bounded_number_of_redirects() -> None:
    f = Follow("k", deadline=None, waits=False)
    for i in range(MAX_REDIRECTS):
        assert f.after(rexc.MovedError(f"1 127.0.0.1:{7000 + i % 2}")) is not None
    with pytest.raises(dl.RedirectedError) as e:
        f.after(rexc.MovedError("1 127.0.0.1:7000"))
    assert e.value.server == "127.0.0.1:7000"
    assert "16 cluster redirects" in str(e.value)
    assert isinstance(e.value, dl.DlockError)
    # Other errors are the answer at once.
    assert Follow("k", None, False).after(rexc.ResponseError("ERR nope")) is None
    assert Follow("k", None, False).next_try() == Try(None, False, None)  # no WAIT
