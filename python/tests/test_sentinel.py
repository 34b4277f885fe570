"""A Sentinel-managed master: the client keeps finding the master through the Sentinel."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.sentinel import Sentinel

import dlock_client as dl
from servers import free_port

SENTINEL = shutil.which("redis-sentinel")


@pytest.fixture
def sentinel_port(new_server: Any) -> Iterator[int]:
    if SENTINEL is None:
        pytest.skip("redis-sentinel is not installed (make setup)")
    master = new_server()
    with tempfile.TemporaryDirectory(prefix="dlock-py-sentinel-") as d:
        port = free_port()
        conf = Path(d) / "sentinel.conf"
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {d}\n"
                        f"sentinel monitor m 127.0.0.1 {master.port} 1\n")
        proc = subprocess.Popen([SENTINEL, str(conf)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    with redis.Redis(port=port) as s:
                        if s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m"):
                            break
                except redis.ConnectionError:
                    pass
                assert time.monotonic() < deadline, "the Sentinel did not start"
                time.sleep(0.02)
            yield port
        finally:
            proc.kill()
            proc.wait()


def test_lock_through_a_sentinel_managed_master(sentinel_port: int, key: str) -> None:
    master = Sentinel([("127.0.0.1", sentinel_port)]).master_for("m")
    with dl.Client(master) as c:
        assert c.server == "sentinel service m"
        held = c.lock(key, fence=True).acquire(timeout=1)
        assert held is not None and held.token == 1
        assert [h.owner for h in c.info(key).holders] == [held.owner]
        assert held.release()


@pytest.mark.asyncio
async def test_asyncio_lock_through_a_sentinel_managed_master(sentinel_port: int,
                                                              key: str) -> None:
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel

    master = AsyncSentinel([("127.0.0.1", sentinel_port)]).master_for("m")
    c = dl.asyncio.Client(master)
    try:
        assert c.server == "sentinel service m"
        held = await c.lock(key).acquire(timeout=1)
        assert held is not None
        assert await held.release()
    finally:
        await c.aclose()
