package io.dlock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.redisson.support.OneServer;
import io.dlock.redisson.support.Resp;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;

/**
 * Redisson objects whose scripts the module leaves to Lua ("works, untouched"): RFairLock, RSemaphore
 * and RPermitExpirableSemaphore keep working with the module loaded. RFairLock's key has RLock's
 * layout, so a dlock holder and a fair lock exclude each other there too.
 */
class UntouchedScriptsTest extends OneServer {
    private final ExecutorService threads = Executors.newCachedThreadPool();

    @AfterAll
    void stopThreads() {
        threads.shutdownNow();
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void fairLockWorksAndExcludesDlock(boolean cache) throws Exception {
        String key = key("fair");
        RLock fair = redisson(cache).getFairLock(key);
        fair.lock();
        try (Resp c = server.connect()) {
            assertNull(c.call("DLOCK.ACQUIRE", key, "dlock-fair:1", 10_000), "dlock refused while the fair lock holds");
            Future<Boolean> waiter = threads.submit(() -> {
                boolean got = fair.tryLock(20, 30, TimeUnit.SECONDS);
                if (got) {
                    fair.unlock();
                }
                return got;
            });
            io.dlock.redisson.support.Await.until(java.time.Duration.ofSeconds(10), "a fair-lock waiter queued",
                    () -> (Long) c.call("LLEN", "redisson_lock_queue:{" + key + "}") == 1L);
            fair.unlock();
            assertTrue(waiter.get(25, TimeUnit.SECONDS), "the queued fair-lock waiter got it");
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, "dlock-fair:1", 10_000));
            assertFalse(threads.submit(() -> fair.tryLock()).get(10, TimeUnit.SECONDS), "the fair lock refused while dlock holds");
            assertEquals(1L, c.call("DLOCK.RELEASE", key, "dlock-fair:1"));
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void semaphoreWorks(boolean cache) throws Exception {
        RSemaphore sem = redisson(cache).getSemaphore(key("sem"));
        assertTrue(sem.trySetPermits(2));
        assertTrue(sem.tryAcquire(2));
        assertFalse(sem.tryAcquire());
        Future<Boolean> waiter = threads.submit(() -> sem.tryAcquire(20, TimeUnit.SECONDS));
        sem.release();
        assertTrue(waiter.get(25, TimeUnit.SECONDS), "a waiting acquire got the released permit");
        assertEquals(0, sem.availablePermits());
        sem.release(2);
        assertEquals(2, sem.availablePermits());
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void permitExpirableSemaphoreWorks(boolean cache) throws Exception {
        RPermitExpirableSemaphore sem = redisson(cache).getPermitExpirableSemaphore(key("psem"));
        assertTrue(sem.trySetPermits(1));
        String id = sem.tryAcquire(0, 30_000, TimeUnit.MILLISECONDS);
        assertNotNull(id);
        assertNull(sem.tryAcquire(0, 30_000, TimeUnit.MILLISECONDS), "no second permit");
        Future<String> waiter = threads.submit(() -> sem.tryAcquire(20_000, 30_000, TimeUnit.MILLISECONDS));
        sem.release(id);
        String second = waiter.get(25, TimeUnit.SECONDS);
        assertNotNull(second, "a waiting acquire got the released permit");
        sem.release(second);
        assertEquals(1, sem.availablePermits());
    }
}
