"""The Python driver of the client conformance suite (conformance/README.md): reads requests
(one JSON object a line) on stdin, calls dlock_client, writes replies and events on stdout.

    python conformance_driver.py --api sync|asyncio

Owner labels: the sync API runs each label's acquires on a thread of its own; the asyncio API
calls each label's ``acquire()`` from a task of its own (the calling task is the owner). Every
other request runs concurrently with the rest (a thread, or a task). A sampler asks every live
hold ``lost.is_set()`` every ``sample_ms`` and reports the change to "lost". A ``cancel``
sets the pending acquire's ``cancel=`` event (sync) or cancels its task (asyncio). ``close``
closes the client and the driver goes on; at the end of stdin it closes the client, ends its
own threads and tasks, and returns (the process must end by itself).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aredis
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.exceptions as rexc
import redis.sentinel

import dlock_client as dl

ERROR_KINDS: tuple[tuple[type, str], ...] = (
    (dl.DeadlockError, "deadlock"),
    (dl.WrongTypeError, "wrong_type"),
    (dl.ModuleNotLoadedError, "module_not_loaded"),
    (dl.ClientClosedError, "closed"),
    (dl.NotHeldError, "not_held"),
    (dl.ResponseTimeoutError, "timeout"),
    (dl.ServerConnectionError, "connection"),
    (dl.ConfigError, "config"),
    (dl.NotSupportedError, "unsupported"),
    (dl.AcquireCancelledError, "cancelled"),
    (asyncio.CancelledError, "cancelled"),
    (rexc.ConnectionError, "connection"),
)


def now_us() -> int:
    return time.monotonic_ns() // 1000


class Out:
    """stdout, one JSON object a line, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj)
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def error_of(exc: BaseException) -> dict[str, Any]:
    kind = next((k for cls, k in ERROR_KINDS if isinstance(exc, cls)), "other")
    return {"kind": kind, "class": type(exc).__name__, "message": str(exc)}


def seconds(ms: Any) -> float | None:
    """Milliseconds as seconds; the strings "nan", "inf", "-inf" as those floats (JSON has
    none), passed to the client as they are (it must refuse them)."""
    if ms is None:
        return None
    return float(ms) / 1000 if isinstance(ms, str) else ms / 1000


def connect_kwargs(req: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"backend": req.get("backend", "auto")}
    if "bind_ms" in req:
        kwargs["bind"] = seconds(req["bind_ms"])
    if "response_timeout_ms" in req:
        kwargs["response_timeout"] = seconds(req["response_timeout_ms"])
    return kwargs


def redis_client(req: dict[str, Any], asyncio_api: bool) -> Any:
    """The caller's redis-py client for the topology the runner names."""
    mod: Any = aredis if asyncio_api else redis
    topology = req.get("topology", "standalone")
    if topology == "sentinel":
        hosts = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in req["sentinels"])]
        return mod.sentinel.Sentinel(hosts).master_for(req["service"])
    if topology == "cluster":
        host, port = req["nodes"][0].rsplit(":", 1)
        return mod.cluster.RedisCluster(host=host, port=int(port))
    return mod.Redis.from_url(req["url"])


def acquirable(client: Any, req: dict[str, Any]) -> Any:
    lease = seconds(req.get("lease_ms", 30000))
    kind = req.get("kind", "lock")
    if kind == "semaphore":
        if "capacity" not in req:  # the client must refuse it
            return client.semaphore(req["key"], lease=lease)
        return client.semaphore(req["key"], req["capacity"], lease=lease)
    delay = seconds(req.get("lock_delay_ms"))
    fence = bool(req.get("fence", False))
    if kind == "lock":
        return client.lock(req["key"], lease=lease, fence=fence, lock_delay=delay)
    rw = client.rwlock(req["key"], lease=lease, fence=fence, lock_delay=delay)
    return rw.read() if kind == "read" else rw.write()


def acquire_args(req: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"timeout": seconds(req.get("wait_ms"))}
    if req.get("kind") == "semaphore":
        args["count"] = req.get("count", 1)
    return args


def grant_reply(held: Any) -> dict[str, Any]:
    if held is None:
        return {"granted": False}
    return {"granted": True, "count": held.count, "token": held.token}


def info_reply(info: Any) -> dict[str, Any]:
    return {"info": {"kind": info.kind,
                     "holders": [[h.owner, h.count, h.lease_ms] for h in info.holders],
                     "waiters": info.waiters}}


def waiters_reply(rows: Any) -> dict[str, Any]:
    return {"waiters": [[w.owner, w.request, w.waited_ms, w.timeout_left_ms] for w in rows]}


class Holds:
    """The driver's holds by name, and the sampler's state (shared by both APIs)."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.holds: dict[str, Any] = {}
        self.last_held: dict[str, int] = {}
        self.live: dict[str, Any] = {}  # sampled: granted, not released, not yet lost

    def add(self, name: str, held: Any) -> None:
        with self.lock:
            self.holds[name] = held
            self.live[name] = held
            self.last_held[name] = now_us()

    def get(self, name: str) -> Any:
        """The hold of that name; None when it was never granted."""
        with self.lock:
            return self.holds.get(name)

    def granted(self, name: str) -> Any:
        held = self.get(name)
        if held is None:
            raise NotHeld(f"{name} was never granted")
        return held

    def ended(self, name: str) -> None:
        with self.lock:
            self.live.pop(name, None)

    def sample(self) -> None:
        with self.lock:
            live = list(self.live.items())
        for name, held in live:
            a = now_us()
            lost = held.lost.is_set()
            b = now_us()
            if b - a >= 1000:
                continue  # straddled a pause: says nothing about when it was taken
            if not lost:
                self.last_held[name] = b
                continue
            with self.lock:
                if self.live.pop(name, None) is None:
                    continue
            self.out.write({"event": "lost", "hold": name, "t_us": b,
                            "last_held_us": self.last_held[name],
                            "reason": held.lost.reason})

    def alive(self) -> None:
        with self.lock:
            names = list(self.live)
        self.out.write({"event": "alive", "t_us": now_us(), "held": names})


def release_reply(holds: Holds, name: str, released: bool) -> dict[str, Any]:
    holds.ended(name)
    return {"released": released}


def held_reply(held: Any) -> dict[str, Any]:
    """"Is it still held?": not if never granted (a cancelled or refused acquire); else the
    hold's own answer, asked now (released, lost, its client closed: ``lost.reason``)."""
    if held is None:
        return {"held": False, "reason": "not_granted"}
    lost = held.lost.is_set()
    return {"held": not lost, "reason": held.lost.reason}


class NotHeld(Exception):
    pass


ERROR_KINDS = ((NotHeld, "not_held"),) + ERROR_KINDS


# -- the sync API ---------------------------------------------------------------------


class SyncDriver:
    def __init__(self, out: Out) -> None:
        self.out = out
        self.holds = Holds(out)
        self.client: dl.Client | None = None
        self.owners: dict[str, queue.Queue[Callable[[], None] | None]] = {}
        self.threads: list[threading.Thread] = []
        self.cancels: dict[int, threading.Event] = {}  # a pending acquire's cancel event
        self.sample_s = 0.002
        self.stopped = threading.Event()

    def reply(self, req: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> None:
        sent = now_us()
        try:
            fields = fn()
            msg = {"id": req["id"], "ok": True, "sent_us": sent, "t_us": now_us(), **fields}
        except BaseException as exc:  # noqa: BLE001 - every failure is a reply
            msg = {"id": req["id"], "ok": False, "sent_us": sent, "t_us": now_us(),
                   "error": error_of(exc)}
        self.out.write(msg)

    def on_owner(self, label: str, job: Callable[[], None]) -> None:
        """Runs `job` on the thread of owner `label` (one thread per label: one owner)."""
        q = self.owners.get(label)
        if q is None:
            q = self.owners[label] = queue.Queue()

            def loop(q: queue.Queue[Callable[[], None] | None] = q) -> None:
                while True:
                    job = q.get()
                    if job is None:
                        return
                    job()

            self.start(loop, f"owner-{label}")
        q.put(job)

    def start(self, target: Callable[[], None], name: str) -> None:
        """A thread of the driver's own (not a daemon: they all end at stdin's end)."""
        t = threading.Thread(target=target, name=name)
        self.threads.append(t)
        t.start()

    def handle(self, req: dict[str, Any]) -> None:
        op = req["op"]
        if op == "connect":
            self.reply(req, lambda: self.connect(req))
        elif op == "acquire":
            self.cancels[req["id"]] = threading.Event()
            self.on_owner(req.get("owner", "main"),
                          lambda: self.reply(req, lambda: self.acquire(req)))
        elif op == "owner_id":
            assert self.client is not None
            client = self.client
            self.on_owner(req.get("owner", "main"),
                          lambda: self.reply(req, lambda: {"owner_id": client.owner()}))
        elif op == "close":
            self.reply(req, self.close)
        else:
            self.start(lambda: self.reply(req, lambda: self.other(req)), f"request-{req['id']}")

    def connect(self, req: dict[str, Any]) -> dict[str, Any]:
        client = dl.Client(redis_client(req, False), **connect_kwargs(req))
        try:
            native = client.native_backend()
        except BaseException:
            client.close()  # nothing left open
            raise
        self.client = client
        self.sample_s = req.get("sample_ms", 2) / 1000
        self.start(self.sampler, "sampler")
        return {"native": native}

    def acquire(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        cancel = self.cancels[req["id"]]
        try:
            held = acquirable(self.client, req).acquire(**acquire_args(req), cancel=cancel)
        finally:
            self.cancels.pop(req["id"], None)
        if held is not None:
            self.holds.add(req["hold"], held)
        return grant_reply(held)

    def other(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        assert self.client is not None
        if op == "release":
            held = self.holds.granted(req["hold"])
            return release_reply(self.holds, req["hold"], held.release())
        if op == "renew":
            return {"renewed": self.holds.granted(req["hold"]).renew()}
        if op == "held":
            return held_reply(self.holds.get(req["hold"]))
        if op == "waiters":
            return waiters_reply(self.client.waiters(req["key"]))
        if op == "info":
            return info_reply(self.client.info(req["key"]))
        if op == "cancel":  # from this thread: the waiting acquire is on its owner's thread
            cancel = self.cancels.get(req["target"])
            if cancel is not None:
                cancel.set()
            return {}
        raise ValueError(f"unknown op {op!r}")

    def close(self) -> dict[str, Any]:
        """Closes the client; the driver goes on (later requests answer ``closed``)."""
        if self.client is not None:
            self.client.close()
        return {}

    def sampler(self) -> None:
        next_alive = time.monotonic()
        while not self.stopped.is_set():
            self.holds.sample()
            if time.monotonic() >= next_alive:
                self.holds.alive()
                next_alive += 0.05
            time.sleep(self.sample_s)

    def run(self) -> None:
        """Until stdin ends; then closes the client and ends its own threads, and returns:
        the process ends by itself when nothing the client opened keeps it alive."""
        for line in sys.stdin:
            if line.strip():
                self.handle(json.loads(line))
        self.close()
        self.stopped.set()
        for q in self.owners.values():
            q.put(None)
        for t in self.threads:
            t.join()


# -- the asyncio API ------------------------------------------------------------------


class AsyncDriver:
    def __init__(self, out: Out) -> None:
        self.out = out
        self.holds = Holds(out)
        self.client: dl.asyncio.Client | None = None
        self.owners: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self.pending: dict[int, asyncio.Task[Any]] = {}
        self.sample_s = 0.002
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def reply(self, req: dict[str, Any], aw: Any, sent: int | None = None) -> None:
        sent = now_us() if sent is None else sent
        try:
            fields = await aw
            msg = {"id": req["id"], "ok": True, "sent_us": sent, "t_us": now_us(), **fields}
        except BaseException as exc:  # noqa: BLE001 - every failure is a reply
            msg = {"id": req["id"], "ok": False, "sent_us": sent, "t_us": now_us(),
                   "error": error_of(exc)}
        self.out.write(msg)

    async def owner_loop(self, q: asyncio.Queue[dict[str, Any]]) -> None:
        """One task per owner label: it *calls* acquire() (so it is the owner) and lets the
        waiting coroutine run in a task of its own, to be cancelled or answered later."""
        while True:
            req = await q.get()
            assert self.client is not None
            if req["op"] == "owner_id":
                await self.reply(req, self.done({"owner_id": self.client.owner()}))
                continue
            sent = now_us()
            try:
                coro = acquirable(self.client, req).acquire(**acquire_args(req))
            except Exception as exc:  # refused where the lock is made (ConfigError)
                await self.reply(req, self.failed(exc), sent)
                continue
            self.pending[req["id"]] = self.spawn(self.reply(req, self.acquired(req, coro), sent))

    @staticmethod
    async def done(fields: dict[str, Any]) -> dict[str, Any]:
        return fields

    @staticmethod
    async def failed(exc: BaseException) -> dict[str, Any]:
        raise exc

    async def acquired(self, req: dict[str, Any], coro: Any) -> dict[str, Any]:
        try:
            held = await coro
        finally:
            self.pending.pop(req["id"], None)
        if held is not None:
            self.holds.add(req["hold"], held)
        return grant_reply(held)

    async def handle(self, req: dict[str, Any]) -> None:
        op = req["op"]
        if op in ("acquire", "owner_id"):
            label = req.get("owner", "main")
            q = self.owners.get(label)
            if q is None:
                q = self.owners[label] = asyncio.Queue()
                self.spawn(self.owner_loop(q))
            q.put_nowait(req)
        elif op == "connect":
            await self.reply(req, self.connect(req))
        elif op == "close":
            await self.reply(req, self.close())
        else:
            self.spawn(self.reply(req, self.other(req)))

    async def connect(self, req: dict[str, Any]) -> dict[str, Any]:
        client = dl.asyncio.Client(redis_client(req, True), **connect_kwargs(req))
        try:
            native = await client.native_backend()
        except BaseException:
            await client.aclose()  # nothing left open
            raise
        self.client = client
        self.sample_s = req.get("sample_ms", 2) / 1000
        self.spawn(self.sampler())
        return {"native": native}

    async def other(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        assert self.client is not None
        if op == "release":
            held = self.holds.granted(req["hold"])
            return release_reply(self.holds, req["hold"], await held.release())
        if op == "renew":
            return {"renewed": await self.holds.granted(req["hold"]).renew()}
        if op == "held":
            return held_reply(self.holds.get(req["hold"]))
        if op == "waiters":
            return waiters_reply(await self.client.waiters(req["key"]))
        if op == "info":
            return info_reply(await self.client.info(req["key"]))
        if op == "cancel":
            task = self.pending.get(req["target"])
            if task is not None:
                task.cancel()
            return {}
        raise ValueError(f"unknown op {op!r}")

    async def close(self) -> dict[str, Any]:
        """Closes the client; the driver goes on (later requests answer ``closed``)."""
        if self.client is not None:
            await self.client.aclose()
        return {}

    async def sampler(self) -> None:
        next_alive = time.monotonic()
        while True:
            self.holds.sample()
            if time.monotonic() >= next_alive:
                self.holds.alive()
                next_alive += 0.05
            await asyncio.sleep(self.sample_s)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()

        def read() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
            loop.call_soon_threadsafe(lines.put_nowait, None)

        reader = threading.Thread(target=read)
        reader.start()
        while True:
            line = await lines.get()
            if line is None:
                break
            if line.strip():
                await self.handle(json.loads(line))
        # stdin ended: close the client, end the driver's own tasks, and return (the process
        # ends by itself when nothing the client opened keeps it alive).
        await self.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        reader.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", choices=("sync", "asyncio"), default="sync")
    api = parser.parse_args().api
    out = Out()
    if api == "sync":
        SyncDriver(out).run()
    else:
        asyncio.run(AsyncDriver(out).run())


if __name__ == "__main__":
    main()
