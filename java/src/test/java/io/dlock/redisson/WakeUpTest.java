package io.dlock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.redisson.support.Await;
import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.HolderMain;
import io.dlock.redisson.support.Monitor;
import io.dlock.redisson.support.OneServer;
import io.dlock.redisson.support.Resp;
import io.dlock.redisson.support.Waiter;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.api.RLock;

/**
 * Waiting across the two: a Redisson waiter blocked in lock()/tryLock(wait, ...) behind a dlock
 * holder, and a DLOCK.ACQUIRE ... WAIT behind a Redisson holder. Each test measures the delay
 * from the moment the lock became free to the grant and prints it
 * (target/surefire-reports/*-output.txt).
 *
 * <p>The bound asserted is {@link #PROMPT_MS}: what a woken waiter takes on a loaded two-core
 * machine with margin (typically a few milliseconds). A waiter that was not woken would wait for
 * the holder's lease (30 s here) or its own time-out, far beyond it.
 */
class WakeUpTest extends OneServer {
    /** A prompt wake-up, with margin for a busy 2-core machine (measured: see the printed delays). */
    static final long PROMPT_MS = 1_000;
    private static final String OTHER = "dlock-owner:7";
    private final ExecutorService waiters = Executors.newCachedThreadPool();

    @AfterAll
    void stopWaiters() {
        waiters.shutdownNow();
    }

    private static void report(String what, boolean cache, long delayMs) {
        System.out.printf("wake-up %s (redisson %s, useScriptCache=%s): %d ms%n", what,
                Clients.redissonVersion(), cache, delayMs);
    }

    /** The Redisson waiter's grant came promptly after {@code freeAtNanos}, not before; reported. */
    private static void assertWokenPromptly(Future<Long> waiter, long freeAtNanos, String what, boolean cache)
            throws Exception {
        long delay = Waiter.delayMs(waiter, freeAtNanos);
        report(what, cache, delay);
        assertTrue(delay > -50, "not granted before the lock was free (" + delay + " ms)");
        assertTrue(delay < PROMPT_MS, "woken " + delay + " ms after the lock was free");
    }

    @ParameterizedTest(name = "lock()={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonWaiterWakesWhenTheDlockHolderReleases(boolean useLock) throws Exception {
        for (boolean cache : new boolean[] {false, true}) {
            String key = key("wake-release");
            try (Resp c = server.connect()) {
                assertEquals(1L, c.call("DLOCK.ACQUIRE", key, OTHER, 30_000));
                Future<Long> waiter = Waiter.start(waiters, redisson(cache).getLock(key), useLock ? -1 : 20);
                Await.redissonWaiter(server, key);
                long freed = System.nanoTime();
                assertEquals(1L, c.call("DLOCK.RELEASE", key, OTHER));
                assertWokenPromptly(waiter, freed, (useLock ? "lock()" : "tryLock(wait)") + " after DLOCK.RELEASE", cache);
            }
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonWaiterWakesWhenTheDlockLeaseExpires(boolean cache) throws Exception {
        String key = key("wake-expiry");
        long lease = 1_500;
        try (Resp c = server.connect()) {
            long start = System.nanoTime();
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, OTHER, lease));
            Future<Long> waiter = Waiter.start(waiters, redisson(cache).getLock(key), 20);
            assertWokenPromptly(waiter, start + lease * 1_000_000, "tryLock(wait) after the dlock lease ended", cache);
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonWaiterWakesWhenBindCutsTheDlockLease(boolean cache) throws Exception {
        String key = key("wake-bind");
        long grace = 200;
        Resp holder = server.connect();
        try {
            assertEquals(1L, holder.call("DLOCK.ACQUIRE", key, OTHER, 30_000, "BIND", grace));
            Future<Long> waiter;
            try (Monitor monitor = new Monitor(server)) {
                waiter = Waiter.start(waiters, redisson(cache).getLock(key), 20);
                // Its attempt after subscribing saw the 30 s lease: it now sleeps on that TTL.
                Await.redissonAsleep(server, monitor, "redisson_lock__channel:{" + key + "}", key);
            }
            long closed = System.nanoTime();
            holder.close();
            assertWokenPromptly(waiter, closed + grace * 1_000_000, "tryLock(wait) after a BIND cut (grace " + grace + " ms)", cache);
        } finally {
            holder.close();
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aDlockWaitIsGrantedWhenTheRedissonHolderUnlocks(boolean cache) {
        String key = key("wait-unlock");
        RLock lock = redisson(cache).getLock(key);
        lock.lock();
        try (Resp waiter = server.connect()) {
            waiter.send("DLOCK.ACQUIRE", key, OTHER, 10_000, "WAIT", 20_000);
            Await.dlockWaiters(server, key, 1);
            long freed = System.nanoTime();
            lock.unlock();
            assertEquals(1L, waiter.read(), "granted to the dlock waiter");
            long delay = Await.millisSince(freed);
            report("DLOCK WAIT after RLock.unlock()", cache, delay);
            assertTrue(delay < PROMPT_MS, "granted " + delay + " ms after the unlock");
            assertEquals(1L, waiter.call("DLOCK.RELEASE", key, OTHER));
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aDlockWaitIsGrantedWhenTheRedissonHoldersJvmDies(boolean cache) throws Exception {
        String key = key("wait-jvm-dies");
        Process jvm = HolderMain.start(server, key, cache);
        try (Resp waiter = server.connect()) {
            BufferedReader out = new BufferedReader(new InputStreamReader(jvm.getInputStream(), StandardCharsets.UTF_8));
            String line = out.readLine();
            assertTrue(line != null && line.startsWith("locked "), "the child JVM took the lock: " + line);
            String owner = line.substring("locked ".length());
            assertEquals(List.of(owner, "1"), server.call("HGETALL", key));
            waiter.send("DLOCK.ACQUIRE", key, OTHER, 10_000, "WAIT", 30_000);
            Await.dlockWaiters(server, key, 1);
            // While the JVM lives, its watchdog renews the lease past lockWatchdogTimeout.
            long alive = System.nanoTime();
            Await.until(Duration.ofSeconds(20), "the lock held past one watchdog timeout",
                    () -> Await.millisSince(alive) > Clients.WATCHDOG_MS + 500);
            assertEquals(1, ((List<?>) server.call("DLOCK.WAITERS", key)).size(), "still waiting: the watchdog renewed");
            long killed = System.nanoTime();
            jvm.destroyForcibly(); // SIGKILL
            assertEquals(1L, waiter.read(), "granted once the dead JVM's lease ended");
            long delay = Await.millisSince(killed);
            report("DLOCK WAIT after kill -9 of the Redisson holder's JVM (watchdog "
                    + Clients.WATCHDOG_MS + " ms)", cache, delay);
            // The last renewal set the lease to WATCHDOG_MS at most WATCHDOG_MS/3 before the kill.
            assertTrue(delay >= Clients.WATCHDOG_MS / 2, "not before the lease ran out: " + delay + " ms");
            assertTrue(delay < Clients.WATCHDOG_MS + PROMPT_MS, "granted " + delay + " ms after the kill");
        } finally {
            jvm.destroyForcibly();
            jvm.waitFor();
        }
    }
}
