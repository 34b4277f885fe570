package io.dlock.redisson.support;

import java.time.Duration;
import java.util.function.Supplier;

/** Waiting on state (a reply, INFO, PUBSUB), never sleeping and hoping. */
public final class Await {
    private Await() {}

    /** Polls {@code condition} every 5 ms until it holds; fails naming {@code what} after {@code limit}. */
    public static void until(Duration limit, String what, Supplier<Boolean> condition) {
        long deadline = System.nanoTime() + limit.toNanos();
        while (!condition.get()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("waited " + limit.toMillis() + " ms for: " + what);
            }
            RedisServer.pause(5);
        }
    }

    /** Until someone subscribes to Redisson's unlock channel of {@code key} (a Redisson waiter is blocked). */
    public static void redissonWaiter(RedisServer server, String key) {
        subscribed(server, "redisson_lock__channel:{" + key + "}");
    }

    /** Until someone subscribes to {@code channel}. */
    public static void subscribed(RedisServer server, String channel) {
        until(Duration.ofSeconds(10), "a subscriber to " + channel, () -> {
            java.util.List<?> reply = (java.util.List<?>) server.call("PUBSUB", "NUMSUB", channel);
            return (Long) reply.get(1) > 0;
        });
    }

    /**
     * Until a Redisson waiter on {@code key} subscribed to {@code channel} and made its attempt
     * after subscribing (its second command on the key): it now sleeps on the TTL that attempt
     * saw, woken only by a message or that TTL.
     */
    public static void redissonAsleep(RedisServer server, Monitor monitor, String channel, String key) {
        subscribed(server, channel);
        until(Duration.ofSeconds(10), "the waiter's attempt after subscribing", () -> monitor.clientCommandsOn(key) >= 2);
    }

    /** Until {@code n} clients wait in DLOCK.WAITERS of {@code key}. */
    public static void dlockWaiters(RedisServer server, String key, int n) {
        until(Duration.ofSeconds(10), n + " dlock waiter(s) on " + key,
                () -> ((java.util.List<?>) server.call("DLOCK.WAITERS", key)).size() == n);
    }

    /** Milliseconds since {@code startNanos} (System.nanoTime()). */
    public static long millisSince(long startNanos) {
        return (System.nanoTime() - startNanos) / 1_000_000;
    }
}
