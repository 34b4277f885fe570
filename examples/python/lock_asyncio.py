"""dlock from redis-py's asyncio client: wait, watchdog task, fencing token, release.

Run against a Redis with the dlock module (`make run`):
    python3 lock_asyncio.py [PORT]     (or DLOCK_PORT=...; default 6379)

Same rules as lock_sync.py (docs/CLIENTS.md): a dedicated connection per WAIT, no read
time-out shorter than the WAIT, no automatic retry; after a time-out or a cancellation,
close that connection and DLOCK.RELEASE with the same owner; a watchdog task renews.
"""

import asyncio
import os
import secrets
import sys
import time

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

PORT = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DLOCK_PORT", "6379"))
KEY = "examples:py-asyncio:orders"
LEASE_MS = 2000  # short for the demo; in production 10-30 s


def shared_client() -> redis.Redis:
    """For short commands (RENEW, RELEASE, reads)."""
    return redis.Redis(host="127.0.0.1", port=PORT, decode_responses=True)


async def acquire(shared: redis.Redis, owner: str, wait_ms: int):
    """DLOCK.ACQUIRE ... WAIT wait_ms FENCE on its own connection -> token, or None."""
    conn = redis.Redis(
        host="127.0.0.1",
        port=PORT,
        decode_responses=True,
        single_connection_client=True,
        socket_connect_timeout=5,
        socket_timeout=None,  # no read time-out: the server answers within wait_ms
        retry=Retry(NoBackoff(), 0),  # never re-send a WAIT
    )
    try:
        # The caller's own bound, a little longer than the server's.
        reply = await asyncio.wait_for(
            conn.execute_command(
                "DLOCK.ACQUIRE", KEY, owner, LEASE_MS, "WAIT", wait_ms, "FENCE"
            ),
            timeout=wait_ms / 1000 + 5,
        )
        return None if reply is None else reply[1]
    except (
        asyncio.TimeoutError,  # our own bound (asyncio.wait_for)
        asyncio.CancelledError,  # the caller cancelled the wait
        # redis-py's own exceptions (redis.asyncio re-exports them), which the built-in
        # TimeoutError / ConnectionError do not catch
        redis.TimeoutError,
        redis.ConnectionError,
    ):
        # Closing the connection takes the waiter out of the queue; a grant made just
        # before is ours and is released here (nil when nothing was granted).
        await conn.aclose()
        await shared.execute_command("DLOCK.RELEASE", KEY, owner)
        raise
    finally:
        await conn.aclose()


async def info(r: redis.Redis) -> dict:
    """DLOCK.INFO as a dict (a map under RESP3, a flat field/value list under RESP2)."""
    reply = await r.execute_command("DLOCK.INFO", KEY)
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


async def watchdog(owner: str, lost: asyncio.Event, counter: list):
    """Renews every LEASE_MS / 3. Sets `lost` when a renewal answers 0, or when no renewal got
    through before the lease ran out (the server died or hangs)."""
    # Its own connection: no retry, and each renewal bounded well inside the lease.
    conn = redis.Redis(host="127.0.0.1", port=PORT, decode_responses=True,
                       retry=Retry(NoBackoff(), 0))
    lease = LEASE_MS / 1000
    deadline = time.monotonic() + lease  # the lease runs from the grant
    pause = lease / 3
    try:
        while True:
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                lost.set()  # no renewal got through in time: the lock may be gone
                return
            sent = time.monotonic()
            try:
                reply = await asyncio.wait_for(
                    conn.execute_command("DLOCK.RENEW", KEY, owner, LEASE_MS), timeout=lease / 3)
            except (asyncio.TimeoutError, redis.ConnectionError, redis.TimeoutError):
                pause = lease / 10  # not reached: try again soon; the deadline decides
                continue
            if reply != 1:
                lost.set()
                return
            deadline, pause = sent + lease, lease / 3
            counter[0] += 1
    finally:
        await conn.aclose()


async def main():
    r = shared_client()
    await r.delete(KEY)
    me = f"{secrets.token_hex(16)}:1"
    other = f"{secrets.token_hex(16)}:1"

    token = await acquire(r, me, wait_ms=2000)
    print(f"acquired token={token}")
    lost, renewals = asyncio.Event(), [0]
    dog = asyncio.create_task(watchdog(me, lost, renewals))

    # The work races the lost signal: stop writing the moment the lock is lost.
    work = asyncio.create_task(asyncio.sleep(1.5 * LEASE_MS / 1000))
    await asyncio.wait([work, asyncio.create_task(lost.wait())], return_when=asyncio.FIRST_COMPLETED)
    held = await r.hget(KEY, me) is not None and not lost.is_set()
    print(f"still held after 1.5 leases: {'yes' if held else 'no'} (renewals={renewals[0]})")

    print(f"contender WAIT 300: {await acquire(r, other, wait_ms=300) or 'nil'}")

    dog.cancel()
    print(f"released={await r.execute_command('DLOCK.RELEASE', KEY, me)}")

    # A waiter cancelled from outside leaves the queue: the lock stays free for others.
    await r.execute_command("DLOCK.ACQUIRE", KEY, me, LEASE_MS)
    task = asyncio.create_task(acquire(r, other, wait_ms=5000))
    while (await info(r))["waiters"] != 1:
        await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    print(f"cancelled waiter left the queue: waiters={(await info(r))['waiters']}")
    await r.execute_command("DLOCK.RELEASE", KEY, me)

    token2 = await acquire(r, other, wait_ms=2000)
    print(f"contender acquired token={token2}")
    print(f"contender released={await r.execute_command('DLOCK.RELEASE', KEY, other)}")

    # The server stops answering (CLIENT PAUSE stands for a dead or hung server): the
    # renewals time out, and the watchdog says the lock is lost once the lease has run out.
    await acquire(r, me, wait_ms=2000)
    lost2 = asyncio.Event()
    dog2 = asyncio.create_task(watchdog(me, lost2, [0]))
    await r.execute_command("CLIENT", "PAUSE", 3 * LEASE_MS, "WRITE")
    paused_at = time.monotonic()
    try:
        await asyncio.wait_for(lost2.wait(), 3 * LEASE_MS / 1000)
    except asyncio.TimeoutError:
        pass
    print(
        f"server unreachable: lost={'yes' if lost2.is_set() else 'no'} after "
        f"{time.monotonic() - paused_at:.1f} s (lease {LEASE_MS / 1000:.1f} s)"
    )
    dog2.cancel()
    await asyncio.gather(dog2, return_exceptions=True)
    await r.execute_command("CLIENT", "UNPAUSE")
    await r.execute_command("DLOCK.RELEASE", KEY, me)
    await r.aclose()


if __name__ == "__main__":
    asyncio.run(main())
