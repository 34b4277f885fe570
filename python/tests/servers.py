"""redis-server processes with (or without) the dlock module, on free loopback ports, and
Redis Clusters of them (:class:`Cluster`).

REDIS_SERVER names the server binary (default `redis-server` on PATH), DLOCK_MODULE the module
(default target/release/libdlock.so of this repository), as for the Rust tests. Used by the
tests (conftest.py) and by bench/bench.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import redis.cluster
from redis.crc import key_slot

REPO = Path(__file__).resolve().parents[2]
MODULE = os.environ.get("DLOCK_MODULE", str(REPO / "target" / "release" / "libdlock.so"))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One redis-server process; `module=False` starts one without dlock; `cluster=True` a
    cluster-enabled node (its bus port free too, its address announced as 127.0.0.1)."""

    def __init__(self, module: bool = True, cluster: bool = False) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="dlock-py-")
        for _ in range(5):
            self.port = free_port()
            args = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", self.dir.name]
            if cluster:
                # The default bus port (port + 10000) may be taken or out of range.
                args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-node-timeout", "5000", "--cluster-port", str(free_port()),
                         "--cluster-announce-ip", "127.0.0.1"]
            if module:
                if not Path(MODULE).exists():
                    raise RuntimeError(f"{MODULE} missing: run `cargo build --release -p dlock`")
                args += ["--loadmodule", MODULE]
            log = open(Path(self.dir.name) / "log", "w")
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_ready():
                return
            self.kill()  # the port was taken meanwhile: another one (same directory)
        raise RuntimeError(f"redis-server did not start: {self.log()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as r:
                    r.ping()
                    return True
            except redis.ConnectionError:
                time.sleep(0.02)
        return False

    def log(self) -> str:
        return (Path(self.dir.name) / "log").read_text()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def redis(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True)

    def kill(self) -> None:
        """kill -9: the server is gone at once, sockets reset."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.kill()
        self.dir.cleanup()


SLOTS = 16384


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Cluster:
    """A Redis Cluster of `primaries` masters (no replicas), the module on every node: node i
    serves the i-th share of the slots at start. Every node is stopped by :meth:`stop` (also
    when the start fails half-way). Mirrors testutil/src/cluster.rs of the Rust tests."""

    def __init__(self, primaries: int = 3) -> None:
        self.nodes: list[Server] = []
        try:
            self.nodes = [Server(cluster=True) for _ in range(primaries)]
            self._join()
        except BaseException:
            self.stop()
            raise

    def _join(self) -> None:
        # Distinct config epochs before the nodes meet, as `redis-cli --cluster create` does.
        for i, n in enumerate(self.nodes):
            with n.redis() as r:
                r.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        per = SLOTS // len(self.nodes)
        for i, n in enumerate(self.nodes):
            hi = SLOTS - 1 if i + 1 == len(self.nodes) else (i + 1) * per - 1
            with n.redis() as r:
                r.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, hi)
        with self.nodes[0].redis() as first:
            for n in self.nodes[1:]:
                with n.redis() as r:
                    bus = r.config_get("cluster-port")["cluster-port"]
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", n.port, bus)
        for n in self.nodes:
            with n.redis() as r:
                wait_for(lambda: len(str(r.execute_command("CLUSTER", "NODES")).splitlines())
                         == len(self.nodes), "every node known")
                wait_for(lambda: "cluster_state:ok" in
                         str(r.execute_command("CLUSTER", "INFO")), "cluster_state:ok")

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    @property
    def port(self) -> int:
        """A seed node's port."""
        return self.nodes[0].port

    def cluster(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A redis-py cluster client seeded with node 0."""
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.port, **kwargs)

    def node_id(self, i: int) -> str:
        with self.nodes[i].redis() as r:
            return str(r.execute_command("CLUSTER", "MYID"))

    def slot_owner(self, slot: int, seen_by: int = 0) -> int:
        """The node (index) serving `slot`, as node `seen_by`'s CLUSTER SLOTS says."""
        with self.nodes[seen_by].redis() as r:
            for lo, hi, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
                if int(lo) <= slot <= int(hi):
                    port = int(master[1])
                    return next(i for i, n in enumerate(self.nodes) if n.port == port)
        raise RuntimeError(f"slot {slot} unassigned")

    def key_owner(self, key: str) -> int:
        return self.slot_owner(key_slot(key.encode()))

    def holder(self, key: str) -> int | None:
        """The node (index) whose keyspace holds `key` now (asked with ASKING, so that a node
        importing the slot answers too)."""
        for i, n in enumerate(self.nodes):
            with n.redis() as r:
                pipe = r.pipeline(transaction=False)
                pipe.execute_command("ASKING")
                pipe.exists(key)
                if pipe.execute(raise_on_error=False)[1] == 1:
                    return i
        return None

    def begin_slot_migration(self, slot: int, src: int, dst: int) -> None:
        """`dst` imports `slot`, `src` migrates it: `src` answers ASK for the slot's keys it
        no longer has, until :meth:`set_slot_owner`."""
        self._setslot(dst, slot, "IMPORTING", self.node_id(src))
        self._setslot(src, slot, "MIGRATING", self.node_id(dst))

    def migrate_keys(self, src: int, dst: int, keys: list[str]) -> None:
        with self.nodes[src].redis() as r:
            r.execute_command("MIGRATE", "127.0.0.1", self.nodes[dst].port, "", 0, 5000,
                              "KEYS", *keys)

    def finish_slot_migration(self, slot: int, src: int, dst: int) -> None:
        """Moves the keys `src` still has in `slot`, then gives the slot to `dst`."""
        with self.nodes[src].redis() as r:
            while True:
                keys = r.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
                if not keys:
                    break
                self.migrate_keys(src, dst, list(keys))
        self.set_slot_owner(slot, dst)

    def move_slot(self, slot: int, src: int, dst: int) -> None:
        """The whole live migration of `slot` from `src` to `dst`."""
        self.begin_slot_migration(slot, src, dst)
        self.finish_slot_migration(slot, src, dst)

    def set_slot_owner(self, slot: int, dst: int) -> None:
        """CLUSTER SETSLOT slot NODE dst on every node, the new owner first (as Redis advises)."""
        node = self.node_id(dst)
        for i in [dst] + [i for i in range(len(self.nodes)) if i != dst]:
            self._setslot(i, slot, "NODE", node)

    def _setslot(self, i: int, slot: int, what: str, node: str) -> None:
        with self.nodes[i].redis() as r:
            r.execute_command("CLUSTER", "SETSLOT", slot, what, node)
