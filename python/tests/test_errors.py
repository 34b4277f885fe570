"""Errors are the package's exceptions, naming the server and the cause."""

from __future__ import annotations

from typing import Any

import pytest

import dlock_client as dl
from servers import Server, free_port


def test_module_not_loaded(new_server: Any, key: str) -> None:
    plain = new_server(module=False)
    with dl.Client.from_url(plain.url) as c:
        with pytest.raises(dl.ModuleNotLoadedError) as e:
            c.lock(key).acquire()
        assert str(e.value) == f"dlock module not loaded on 127.0.0.1:{plain.port}"
        assert e.value.server == f"127.0.0.1:{plain.port}"
        with pytest.raises(dl.ModuleNotLoadedError):
            c.info(key)


def test_refused_connection(key: str) -> None:
    port = free_port()
    with dl.Client.from_url(f"redis://127.0.0.1:{port}/0") as c:
        with pytest.raises(dl.ServerConnectionError, match=f"cannot reach 127.0.0.1:{port}"):
            c.lock(key).acquire(timeout=1)
        with pytest.raises(ConnectionError):  # also a built-in ConnectionError
            c.semaphore(key, 1).acquire()


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
