"""What a read time-out plus automatic retry does to a WAIT in redis-py, and the fix.

Run against a Redis with the dlock module (`make run`):
    python3 ghost_grant.py [PORT]      (or DLOCK_PORT=...; default 6379)

Both cases send `DLOCK.ACQUIRE key owner 10000 WAIT 1500` while another owner holds the
lock, and the holder releases only after those 1.5 s have passed.

- bad:  `socket_timeout=0.5` with redis-py's default retry. After 0.5 s the client closes
        the socket (the server drops the waiter) and sends the command again, which joins
        the queue at the tail with a fresh 1.5 s. The caller that asked to wait at most
        1.5 s gets the lock later than that, after several re-sends; meanwhile it lost its
        place in the queue each time.
- good: the documented setting: `socket_timeout=None` (or longer than the WAIT) and
        `retry=Retry(NoBackoff(), 0)`: one send, and the reply is nil after 1.5 s.
"""

import os
import sys
import threading
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

PORT = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DLOCK_PORT", "6379"))
KEY = "examples:py-ghost:orders"
WAIT_MS = 1500


def info(r: redis.Redis) -> dict:
    reply = r.execute_command("DLOCK.INFO", KEY)
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


def connections_made(r: redis.Redis) -> int:
    """How many connections the server has accepted (INFO stats).

    The waiter sends its WAIT once per connection: redis-py retries a timed-out command on a
    new one. (INFO commandstats cannot count the sends: Redis 7.2+ and Valkey count a blocked
    command when it ends, and not at all when its client left first.)
    """
    return int(r.info("stats")["total_connections_received"])


def scenario(label: str, make_waiter):
    admin = redis.Redis(host="127.0.0.1", port=PORT, decode_responses=True)
    admin.delete(KEY)
    admin.execute_command("DLOCK.ACQUIRE", KEY, "holder", 30000)
    before = connections_made(admin)
    # Made after `before`: a single-connection client connects at once.
    waiter = make_waiter()
    result = {}

    def call():
        start = time.monotonic()
        try:
            result["reply"] = waiter.execute_command(
                "DLOCK.ACQUIRE", KEY, label, 10000, "WAIT", WAIT_MS
            )
        except redis.RedisError as e:
            result["reply"] = f"error {type(e).__name__}"
        result["secs"] = time.monotonic() - start

    t = threading.Thread(target=call)
    t.start()
    # The holder releases once the WAIT has run out and a waiter is queued again (a re-send),
    # or once the call has returned.
    start = time.monotonic()
    while True:
        if time.monotonic() - start > WAIT_MS / 1000 + 0.1:
            if "secs" in result or info(admin)["waiters"] == 1:
                break
        time.sleep(0.01)
    admin.execute_command("DLOCK.RELEASE", KEY, "holder")
    t.join()
    sends = connections_made(admin) - before
    reply = "nil" if result["reply"] is None else result["reply"]
    print(
        f"{label}: WAIT {WAIT_MS} answered {reply} after {result['secs']:.2f} s, "
        f"sent {sends} time(s)"
    )
    # Whatever happened, the caller releases with its owner (nil when it holds nothing).
    admin.execute_command("DLOCK.RELEASE", KEY, label)
    waiter.close()
    admin.close()


def main():
    scenario(
        "bad",
        lambda: redis.Redis(
            host="127.0.0.1", port=PORT, decode_responses=True, socket_timeout=0.5
        ),
    )
    scenario(
        "good",
        lambda: redis.Redis(
            host="127.0.0.1",
            port=PORT,
            decode_responses=True,
            single_connection_client=True,
            socket_timeout=None,
            retry=Retry(NoBackoff(), 0),
        ),
    )


if __name__ == "__main__":
    main()
