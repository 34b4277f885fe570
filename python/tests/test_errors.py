"""Errors are the package's exceptions, naming the server and the cause."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

import dlock_client as dl
from servers import Server, free_port


def test_module_not_loaded(new_server: Any, key: str) -> None:
    plain = new_server(module=False)
    with dl.Client.from_url(plain.url, backend="native") as c:
        with pytest.raises(dl.ModuleNotLoadedError) as e:
            c.lock(key).acquire()
        assert str(e.value) == f"dlock module not loaded on 127.0.0.1:{plain.port}"
        assert e.value.server == f"127.0.0.1:{plain.port}"
        with pytest.raises(dl.ModuleNotLoadedError):
            c.info(key)


def test_refused_connection(key: str) -> None:
    port = free_port()
    with dl.Client.from_url(f"redis://127.0.0.1:{port}/0") as c:
        with pytest.raises(dl.ServerConnectionError, match=f"cannot reach 127.0.0.1:{port}") as e:
            c.lock(key).acquire(timeout=1)
        assert isinstance(e.value.__cause__, redis.exceptions.ConnectionError), "cause kept"
        with pytest.raises(ConnectionError):  # also a built-in ConnectionError
            c.semaphore(key, 1).acquire()
        with pytest.raises(redis.exceptions.ConnectionError):  # and redis-py's
            c.lock(key).acquire()


def test_errors_are_redis_errors() -> None:
    for cls in (dl.DlockError, dl.ModuleNotLoadedError, dl.ServerConnectionError,
                dl.WrongTypeError, dl.DeadlockError, dl.NotSupportedError, dl.CommandError,
                dl.ConfigError, dl.AcquireTimeoutError):
        assert issubclass(cls, redis.RedisError), cls
    assert issubclass(dl.ConfigError, ValueError)
    assert issubclass(dl.AcquireTimeoutError, redis.exceptions.LockError)


def test_bad_values_refused_where_the_lock_is_made(client: dl.Client, key: str) -> None:
    for bad in (dict(lease=0), dict(lease=-1), dict(lease=float("nan")), dict(lock_delay=120),
                dict(lock_delay=-1)):
        with pytest.raises(dl.ConfigError):
            client.lock(key, **bad)  # type: ignore[arg-type]
    with pytest.raises(dl.ConfigError, match="capacity"):
        client.semaphore(key, 0)
    with pytest.raises(dl.ConfigError, match="count"):
        client.semaphore(key, 2).acquire(count=0)
    with pytest.raises(dl.ConfigError):
        client.lock("")
    with pytest.raises(dl.ConfigError, match="bind"):
        dl.Client.from_url("redis://127.0.0.1:1/0", bind=0)


def test_bounded_with_raises_a_timeout(client: dl.Client, key: str) -> None:
    holder = client.lock(key).acquire()
    assert holder is not None
    out: list[Any] = []

    def other() -> None:
        try:
            with client.lock(key)(timeout=0.2):
                out.append("entered")
        except dl.AcquireTimeoutError as e:
            out.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join(5)
    assert isinstance(out[0], TimeoutError) and key in str(out[0])
    holder.release()
    with client.lock(key)(timeout=1) as held:
        assert held.count == 1 and client.info(key).holders[0].owner == held.owner
    assert client.info(key).kind == "none"


def test_wrong_type(server: Server, client: dl.Client, key: str) -> None:
    with server.redis() as r:
        r.set(key, "a user's value")
    with pytest.raises(dl.WrongTypeError, match="WRONGTYPE"):
        client.lock(key).acquire()
    with pytest.raises(dl.WrongTypeError):
        client.info(key)
    with server.redis() as r:
        assert r.get(key) == "a user's value"
    sem = client.semaphore(key + ":s", 2).acquire()
    assert sem is not None
    with pytest.raises(dl.WrongTypeError):
        client.lock(key + ":s").acquire(timeout=0)
    sem.release()


def test_bad_arguments(client: dl.Client, key: str) -> None:
    with pytest.raises(ValueError):
        client.lock(key, lease=-1)
    with pytest.raises(dl.CommandError, match="COUNT 5 is more than the capacity 4"):
        client.semaphore(key, 4).acquire(count=5)
    assert issubclass(dl.CommandError, dl.DlockError)
