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
   a renewal answers 0 (the lock is lost).
5. The fencing token goes with every write to the protected resource, which refuses a token
   lower than one it has seen.
"""

import os
import secrets
import sys
import threading
import time

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


def acquire(owner: str, wait_ms: int):
    """DLOCK.ACQUIRE key owner lease WAIT wait_ms FENCE -> fencing token, or None (timed out)."""
    conn = waiting_client(wait_ms)
    try:
        reply = conn.execute_command(
            "DLOCK.ACQUIRE", KEY, owner, LEASE_MS, "WAIT", wait_ms, "FENCE"
        )
        return None if reply is None else reply[1]
    except (redis.TimeoutError, redis.ConnectionError):
        # We do not know whether the server granted the lock just before the failure.
        conn.close()  # closing the connection takes the waiter out of the queue
        shared_client().execute_command("DLOCK.RELEASE", KEY, owner)  # nil when not granted
        raise
    finally:
        conn.close()


class Watchdog:
    """Renews the lease every LEASE_MS / 3 until stopped; `lost` is set when a renewal fails."""

    def __init__(self, client: redis.Redis, owner: str):
        self.client, self.owner = client, owner
        self.renewals = 0
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(LEASE_MS / 3 / 1000):
            if self.client.execute_command("DLOCK.RENEW", KEY, self.owner, LEASE_MS) != 1:
                self.lost.set()  # expired, deleted or taken over: stop writing
                return
            self.renewals += 1

    def stop(self):
        self._stop.set()
        self._thread.join()


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
    dog = Watchdog(r, me)
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


if __name__ == "__main__":
    main()
