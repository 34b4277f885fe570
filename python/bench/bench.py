"""Python-side cost of a lock cycle, and hand-offs on a hot lock: dlock_client against
redis-py's Lock and python-redis-lock, all on the same server (redis-server with the module).

    python/.venv/bin/python python/bench/bench.py [--quick] [--no-write]

Rewrites the part of docs/BENCHMARKS.md between its bench-python markers (unless
--no-write). `make bench` runs it with --no-write, `make bench-docs` without.

- uncontended: one acquire + release after another on a free lock, in one thread; the
  Python process's CPU time (time.process_time: every thread, so renewal threads count) and
  wall time per cycle. Median of the repetitions.
- hot lock: THREADS threads (one process) take and release one lock as fast as they can for
  SECONDS; grants per second. redis-py's Lock polls (every 0.1 s by default); python-redis-lock
  waits on a BLPOP signal; dlock_client waits in the server's FIFO queue.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis
import redis_lock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import dlock_client as dl  # noqa: E402
from servers import REPO, Server  # noqa: E402

START, END = "<!-- bench-python:start -->", "<!-- bench-python:end -->"
LEASE = 30.0

Cycle = Callable[[str, Callable[[], None]], None]


def nothing() -> None:
    pass


def variants(url: str) -> dict[str, tuple[Cycle, Callable[[], None]]]:
    """name -> (one acquire + release on a key, clean-up)."""
    r = redis.Redis.from_url(url)
    client = dl.Client.from_url(url)

    def dlock_cycle(key: str, inside: Callable[[], None]) -> None:
        held = client.lock(key, lease=LEASE).acquire()
        assert held is not None
        inside()
        held.release()

    def dlock_try_cycle(key: str, inside: Callable[[], None]) -> None:
        held = client.lock(key, lease=LEASE).acquire(timeout=0)
        assert held is not None
        inside()
        held.release()

    def redis_py_cycle(key: str, inside: Callable[[], None]) -> None:
        lock = r.lock(key, timeout=LEASE)
        assert lock.acquire(blocking=True)
        inside()
        lock.release()

    def prl_cycle(key: str, inside: Callable[[], None]) -> None:
        lock = redis_lock.Lock(r, key, expire=int(LEASE), auto_renewal=True)
        assert lock.acquire(blocking=True)
        inside()
        lock.release()

    def prl_plain_cycle(key: str, inside: Callable[[], None]) -> None:
        lock = redis_lock.Lock(r, key, expire=int(LEASE))
        assert lock.acquire(blocking=True)
        inside()
        lock.release()

    def close() -> None:  # after the last variant: a closed client refuses every call
        client.close()
        r.close()

    return {
        "dlock_client acquire()": (dlock_cycle, lambda: None),
        "dlock_client acquire(timeout=0)": (dlock_try_cycle, lambda: None),
        "redis-py Lock": (redis_py_cycle, lambda: None),
        "python-redis-lock (auto_renewal)": (prl_cycle, lambda: None),
        "python-redis-lock (no renewal)": (prl_plain_cycle, close),
    }


def uncontended(cycle: Cycle, n: int, reps: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per cycle: medians over `reps` runs of `n` cycles."""
    cpu, wall = [], []
    for rep in range(reps):
        for _ in range(n // 10):  # warm-up: connections, first renewal thread
            cycle(f"bench:py:warm:{rep}", nothing)
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            cycle(f"bench:py:free:{rep}", nothing)
        cpu.append((time.process_time() - c0) / n * 1e6)
        wall.append((time.perf_counter() - w0) / n * 1e6)
    return statistics.median(cpu), statistics.median(wall)


def uncontended_asyncio(url: str, n: int, reps: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        client = dl.asyncio.Client.from_url(url)
        cpu, wall = [], []
        try:
            for rep in range(reps):
                lock = client.lock(f"bench:py:async:{rep}", lease=LEASE)
                for _ in range(n // 10):
                    h = await lock.acquire()
                    assert h is not None
                    await h.release()
                c0, w0 = time.process_time(), time.perf_counter()
                for _ in range(n):
                    h = await lock.acquire()
                    assert h is not None
                    await h.release()
                cpu.append((time.process_time() - c0) / n * 1e6)
                wall.append((time.perf_counter() - w0) / n * 1e6)
        finally:
            await client.aclose()
        return statistics.median(cpu), statistics.median(wall)

    return asyncio.run(run())


def hot_lock(hold: Callable[[str, Callable[[], None]], None], threads: int,
             seconds: float) -> tuple[float, float, int, int]:
    """(grants/s, hand-offs/s, fewest and most grants of one thread) on one key. A hand-off
    is a grant to another thread than the last holder."""
    stop = threading.Event()
    counts = [0] * threads
    handoffs = [0]
    last = [-1]

    def worker(i: int) -> None:
        def inside() -> None:
            if last[0] != i:
                handoffs[0] += 1
                last[0] = i
            counts[i] += 1

        while not stop.is_set():
            hold("bench:py:hot", inside)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    took = time.perf_counter() - start
    return sum(counts) / took, handoffs[0] / took, min(counts), max(counts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    n, reps, threads, seconds = (300, 2, 4, 1.5) if args.quick else (2000, 3, 4, 4.0)

    srv = Server()
    try:
        load0 = os.getloadavg()[0]
        rows = []
        for name, (cycle, cleanup) in variants(srv.url).items():
            cpu, wall = uncontended(cycle, n, reps)
            cleanup()
            rows.append((name, cpu, wall))
            print(f"uncontended  {name:34} {cpu:8.1f} µs CPU {wall:8.1f} µs wall", flush=True)
        cpu, wall = uncontended_asyncio(srv.url, n, reps)
        rows.insert(2, ("dlock_client.asyncio acquire()", cpu, wall))
        print(f"uncontended  {'dlock_client.asyncio acquire()':34} {cpu:8.1f} µs CPU "
              f"{wall:8.1f} µs wall", flush=True)
        hot = []
        for name, (cycle, cleanup) in variants(srv.url).items():
            if name in ("dlock_client acquire(timeout=0)", "python-redis-lock (no renewal)"):
                cleanup()
                continue
            rate, handoffs, fewest, most = hot_lock(cycle, threads, seconds)
            hot.append((name, rate, handoffs, fewest, most))
            print(f"hot lock     {name:34} {rate:8.0f} grants/s {handoffs:8.0f} hand-offs/s "
                  f"per thread {fewest}..{most}", flush=True)
            cleanup()
        load1 = os.getloadavg()[0]
        version = redis.Redis(port=srv.port).info("server")["redis_version"]
    finally:
        srv.stop()

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Last run: {now}; nproc {os.cpu_count()}; Python {platform.python_version()}, "
        f"redis-py {redis.__version__}, python-redis-lock {redis_lock.__version__}; "
        f"Redis {version}; load average {load0:.2f} at start, {load1:.2f} at end"
        f"{' (--quick)' if args.quick else ''}. Generated by `python/bench/bench.py`.",
        "",
        f"Uncontended acquire + release, one thread, {n} cycles, median of {reps} runs "
        "(CPU: the whole Python process, renewal threads included):",
        "",
        "| client | CPU µs/cycle | wall µs/cycle |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {cpu:.1f} | {wall:.1f} |" for name, cpu, wall in rows]
    lines += [
        "",
        f"Hot lock: {threads} threads of one process, one key, {seconds:g} s, each releasing "
        "at once and acquiring again; a hand-off is a grant to another thread than the last "
        "holder:",
        "",
        "| client | grants/s | hand-offs/s | grants of the least / most served thread |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {rate:.0f} | {handoffs:.0f} | {fewest} / {most} |"
              for name, rate, handoffs, fewest, most in hot]
    section = "\n".join(lines) + "\n"
    if not args.no_write:
        path = REPO / "docs" / "BENCHMARKS.md"
        text = path.read_text()
        a, b = text.find(START), text.find(END)
        if 0 <= a < b:
            path.write_text(f"{text[:a]}{START}\n{section}{text[b:]}")
            print("docs/BENCHMARKS.md updated")
        else:
            print(f"docs/BENCHMARKS.md has no {START} marker: not written")
    print(section)


if __name__ == "__main__":
    main()
