"""dlock from redis-py (synchronous): wait, watchdog, fencing token, release.

Run against a Redis with the dlock module (`make run`):
    python3 lock_sync.py [PORT]        (or DLOCK_PORT=...; default 6379)

The rules it follows (docs/CLIENTS.md explains each one):
1. A blocking `WAIT` gets its own connection: a blocked reply stalls every other command
   sent on the same connection.
2. That connection has no read time-out (or one longer than the WAIT) and no automatic
   retry: redis-py 8 re-sends a command after a time-out by default, and each re-send
   queues the WAIT again at the tail.
3. After a client-side time-out or error on a WAIT, close that connection (the server drops
   the waiter) and send DLOCK.RELEASE with the same owner: the grant may have been made
   just before the connection closed. Or let the lease expire.
4. A watchdog renews the lease (DLOCK.RENEW) while the work runs, and stops the work when
   a renewal answers 0 or no renewal got through before the lease ran out (the lock is lost).
5. The fencing token goes with every write to the protected resource, which refuses a token
   lower than one it has seen.
"""

import os
import secrets
import sys
import threading
import time
from typing import Optional

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

PORT = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DLOCK_PORT", "6379"))
KEY = "examples:py-sync:orders"
LEASE_MS = 2000  # short for the demo; in production 10-30 s


def shared_client() -> redis.Redis:
    """For short commands (RENEW, RELEASE, reads): the defaults, retries included, are fine."""
    return redis.Redis(host="127.0.0.1", port=PORT, decode_responses=True)


def waiting_client(wait_ms: int) -> redis.Redis:
    """A dedicated connection for one blocking DLOCK.ACQUIRE ... WAIT."""
    return redis.Redis(
        host="127.0.0.1",
        port=PORT,
        decode_responses=True,
        single_connection_client=True,  # one socket, not a pool
        socket_connect_timeout=5,
        # Read time-out longer than the WAIT (None = no time-out): the server answers by then.
        socket_timeout=wait_ms / 1000 + 5,
        retry=Retry(NoBackoff(), 0),  # never re-send a WAIT
    )


def acquire(owner: str, wait_ms: int) -> Optional[int]:
    """DLOCK.ACQUIRE key owner lease WAIT wait_ms FENCE -> fencing token, or None (timed out)."""
    conn = waiting_client(wait_ms)
    try:
        reply = conn.execute_command(
            "DLOCK.ACQUIRE", KEY, owner, LEASE_MS, "WAIT", wait_ms, "FENCE"
        )
        return None if reply is None else int(reply[1])
    except (redis.TimeoutError, redis.ConnectionError):
        # We do not know whether the server granted the lock just before the failure.
        conn.close()  # closing the connection takes the waiter out of the queue
        shared_client().execute_command("DLOCK.RELEASE", KEY, owner)  # nil when not granted
        raise
    finally:
        conn.close()


class Watchdog:
    """Renews the lease every LEASE_MS / 3 until stopped. `lost` is set when a renewal answers
    0 (expired, deleted or taken over), or when no renewal got through before the lease ran
    out (the server died or hangs: a renewal that fails must not end the thread unnoticed)."""

    def __init__(self, owner: str):
        self.owner = owner
        # Its own connection, with a read time-out well inside the lease and no retry: a
        # renewal that hangs is given up and tried again while the lease lasts.
        self.client = redis.Redis(
            host="127.0.0.1", port=PORT, decode_responses=True,
            socket_connect_timeout=LEASE_MS / 3 / 1000, socket_timeout=LEASE_MS / 3 / 1000,
            retry=Retry(NoBackoff(), 0),
        )
        self.renewals = 0
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        lease = LEASE_MS / 1000
        deadline = time.monotonic() + lease  # the lease runs from the grant
        pause = lease / 3
        while not self._stop.wait(min(pause, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self.lost.set()  # no renewal got through in time: the lock may be gone
                return
            sent = time.monotonic()
            try:
                reply = self.client.execute_command("DLOCK.RENEW", KEY, self.owner, LEASE_MS)
            except (redis.ConnectionError, redis.TimeoutError):
                pause = lease / 10  # not reached: try again soon; the deadline decides
                continue
            if reply != 1:
                self.lost.set()  # expired, deleted or taken over: stop writing
                return
            deadline, pause = sent + lease, lease / 3
            self.renewals += 1

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.client.close()


class FencedStore:
    """Stands for the resource the lock protects: it refuses writes with an older token."""

    def __init__(self):
        self.highest = 0

    def write(self, token: int) -> bool:
        if token < self.highest:
            return False
        self.highest = token
        return True


def main():
    r = shared_client()
    r.delete(KEY)
    me = f"{secrets.token_hex(16)}:1"
    other = f"{secrets.token_hex(16)}:1"
    store = FencedStore()

    token = acquire(me, wait_ms=2000)
    print(f"acquired token={token}")
    dog = Watchdog(me)
    time.sleep(1.5 * LEASE_MS / 1000)  # the work: longer than one lease
    held = r.hget(KEY, me) is not None and not dog.lost.is_set()
    print(f"still held after 1.5 leases: {'yes' if held else 'no'} (renewals={dog.renewals})")

    print(f"contender WAIT 300: {acquire(other, wait_ms=300) or 'nil'}")

    dog.stop()
    print(f"released={r.execute_command('DLOCK.RELEASE', KEY, me)}")

    token2 = acquire(other, wait_ms=2000)
    print(f"contender acquired token={token2}")
    print(f"write with token {token2}: {'accepted' if store.write(token2) else 'refused'}")
    # A late write from the first holder (e.g. after a long pause) carries the older token.
    print(f"late write with token {token}: {'accepted' if store.write(token) else 'refused'}")
    print(f"contender released={r.execute_command('DLOCK.RELEASE', KEY, other)}")

    # The server stops answering (CLIENT PAUSE stands for a dead or hung server): the
    # renewals time out, and the watchdog says the lock is lost once the lease has run out.
    acquire(me, wait_ms=2000)
    dog = Watchdog(me)
    r.execute_command("CLIENT", "PAUSE", 3 * LEASE_MS, "WRITE")
    paused_at = time.monotonic()
    dog.lost.wait(3 * LEASE_MS / 1000)
    print(
        f"server unreachable: lost={'yes' if dog.lost.is_set() else 'no'} after "
        f"{time.monotonic() - paused_at:.1f} s (lease {LEASE_MS / 1000:.1f} s)"
    )
    dog.stop()
    r.execute_command("CLIENT", "UNPAUSE")
    r.execute_command("DLOCK.RELEASE", KEY, me)


if __name__ == "__main__":
    main()
