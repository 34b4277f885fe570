package io.dlock.redisson.serving;

import java.time.Duration;

import io.dlock.redisson.support.Await;
import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.Resp;

/** Waiting for Redisson's watchdog by the state it leaves, not by a sleep. */
final class Watchdog {
    private Watchdog() {}

    /**
     * Until the watchdog renewed {@code key} (taken with the watchdog at {@code lockedNanos},
     * System.nanoTime()): its TTL grows back above what it would be left without a renewal.
     */
    static void awaitRenewal(Resp admin, String key, long lockedNanos) {
        Await.until(Duration.ofSeconds(10), "the watchdog's renewal of " + key, () -> {
            long unrenewed = Clients.WATCHDOG_MS - (System.nanoTime() - lockedNanos) / 1_000_000;
            return (Long) admin.ok("PTTL", key) > unrenewed + 200;
        });
    }
}
