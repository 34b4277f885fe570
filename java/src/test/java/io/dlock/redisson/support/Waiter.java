package io.dlock.redisson.support;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.redisson.api.RLock;

/** A Redisson waiter in a thread of its own (RLock is per thread), and when it got the lock. */
public final class Waiter {
    /** The lease the waiters here take (they unlock at once). */
    private static final long LEASE_S = 30;

    private Waiter() {}

    /**
     * {@code lock.tryLock(waitSeconds, 30 s)}, or {@code lock.lock(30 s)} when {@code waitSeconds}
     * is negative; the future gives the {@code System.nanoTime()} of the grant (the lock is
     * unlocked right after), or -1 when it was not granted.
     */
    public static Future<Long> start(ExecutorService threads, RLock lock, long waitSeconds) {
        return threads.submit(() -> {
            boolean got;
            if (waitSeconds < 0) {
                lock.lock(LEASE_S, TimeUnit.SECONDS);
                got = true;
            } else {
                got = lock.tryLock(waitSeconds, LEASE_S, TimeUnit.SECONDS);
            }
            long at = System.nanoTime();
            if (got) {
                lock.unlock();
            }
            return got ? at : -1L;
        });
    }

    /** Milliseconds from {@code freeAtNanos} to the waiter's grant; fails when it was not granted. */
    public static long delayMs(Future<Long> waiter, long freeAtNanos) throws Exception {
        long granted = waiter.get(60, TimeUnit.SECONDS);
        if (granted < 0) {
            throw new AssertionError("the Redisson waiter did not get the lock");
        }
        return (granted - freeAtNanos) / 1_000_000;
    }
}
