package io.dlock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.dlock.redisson.support.Await;
import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.Monitor;
import io.dlock.redisson.support.OneServer;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;
import io.dlock.redisson.support.Waiter;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.api.RReadWriteLock;

/**
 * RReadWriteLock against DLOCK.RWLOCK on one key. The two layouts differ (Redisson: {@code mode}
 * plus {@code <owner>} / {@code <owner>:write} counts and timeout keys; dlock: {@code mode} plus
 * {@code read:<owner>}, {@code write:<owner>}, {@code lease:<owner>}), so they do not share a
 * key; what these tests pin down is that neither side ever lets a writer in beside another
 * holder, in either order: the Redisson side waits, the dlock side answers WRONGTYPE at once.
 * A Redisson reader does not join a dlock reader either: the module refuses its script there
 * (see {@link #aRedissonReaderWaitsBehindADlockReader}).
 */
class ReadWriteInteropTest extends OneServer {
    private static final String WRONGTYPE = "WRONGTYPE";
    private static final String D = "dlock-rw:1";
    private final ExecutorService threads = Executors.newCachedThreadPool();

    @AfterAll
    void stopThreads() {
        threads.shutdownNow();
    }

    private static String code(Object reply) {
        return reply instanceof Resp.Error e ? e.code() : String.valueOf(reply);
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aDlockWriterKeepsRedissonReadersAndWritersOut(boolean cache) {
        String key = key("rw-dlock-write");
        RReadWriteLock rw = redisson(cache).getReadWriteLock(key);
        try (Resp c = server.connect()) {
            assertEquals(1L, c.call("DLOCK.RWLOCK", key, D, "WRITE", 10_000));
            assertFalse(rw.readLock().tryLock(), "no Redisson reader beside a dlock writer");
            assertFalse(rw.writeLock().tryLock(), "no second writer");
            assertEquals(1L, c.call("DLOCK.RWLOCK", key, D, "READ", 10_000), "the writer's own read hold");
            assertFalse(rw.readLock().tryLock());
            assertEquals(Map.of("mode", "write", "write:" + D, "1", "read:" + D, "1"), withoutLeases(c.hgetall(key)));
            assertEquals(1L, c.call("DLOCK.RELEASE", key, D, "WRITE"));
            assertEquals(1L, c.call("DLOCK.RELEASE", key, D, "READ"));
            assertTrue(rw.writeLock().tryLock(), "free again");
            rw.writeLock().unlock();
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aDlockReaderKeepsARedissonWriterOut(boolean cache) {
        String key = key("rw-dlock-read");
        RReadWriteLock rw = redisson(cache).getReadWriteLock(key);
        try (Resp c = server.connect()) {
            assertEquals(1L, c.call("DLOCK.RWLOCK", key, D, "READ", 10_000));
            assertFalse(rw.writeLock().tryLock(), "no Redisson writer beside a dlock reader");
            assertEquals(1L, c.call("DLOCK.RELEASE", key, D));
            assertTrue(rw.writeLock().tryLock());
            rw.writeLock().unlock();
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonWriterIsAnsweredWrongtypeByDlock(boolean cache) {
        String key = key("rw-redisson-write");
        RReadWriteLock rw = redisson(cache).getReadWriteLock(key);
        rw.writeLock().lock();
        try (Resp c = server.connect()) {
            assertEquals(Map.of("mode", "write", Clients.owner(redisson(cache)) + ":write", "1"), c.hgetall(key));
            assertEquals(WRONGTYPE, code(c.call("DLOCK.RWLOCK", key, D, "WRITE", 10_000)));
            assertEquals(WRONGTYPE, code(c.call("DLOCK.RWLOCK", key, D, "READ", 10_000)));
            assertEquals(WRONGTYPE, code(c.call("DLOCK.RWLOCK", key, D, "WRITE", 10_000, "WAIT", 5_000)),
                    "a waiting request is answered at once, not queued");
            assertEquals(WRONGTYPE, code(c.call("DLOCK.ACQUIRE", key, D, 10_000)));
            assertEquals(Map.of("mode", "write", Clients.owner(redisson(cache)) + ":write", "1"), c.hgetall(key),
                    "untouched");
        } finally {
            rw.writeLock().unlock();
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonReaderIsAnsweredWrongtypeByDlock(boolean cache) {
        String key = key("rw-redisson-read");
        RReadWriteLock rw = redisson(cache).getReadWriteLock(key);
        rw.readLock().lock();
        try (Resp c = server.connect()) {
            assertEquals(WRONGTYPE, code(c.call("DLOCK.RWLOCK", key, D, "WRITE", 10_000)));
            assertEquals(WRONGTYPE, code(c.call("DLOCK.RWLOCK", key, D, "READ", 10_000)),
                    "readers do not share across the layouts in this order");
        } finally {
            rw.readLock().unlock();
        }
        try (Resp c = server.connect()) {
            assertEquals(0L, c.call("EXISTS", key));
            assertEquals(1L, c.call("DLOCK.RWLOCK", key, D, "WRITE", 10_000), "free once Redisson unlocked");
            assertEquals(1L, c.call("DLOCK.RELEASE", key, D));
        }
    }

    /**
     * Redisson's read script grants on any hash whose {@code mode} is {@code read}; run as Lua on
     * a dlock reader's key it would join, leaving the key in neither layout (every DLOCK command
     * then answers WRONGTYPE, and Redisson's read unlock and renewal loop over dlock's lease
     * deadline as a hold count: BUSY). The module serves that script (redisson native, the
     * default): on a dlock read-write lock it answers as for a lock held by others, its PTTL, and
     * changes nothing, so the Redisson reader waits. (With {@code redisson lua} it still joins:
     * one key, one kind of read-write lock.)
     */
    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonReaderWaitsBehindADlockReader(boolean cache) {
        // With redisson lua the script is Redisson's own Lua, which joins (docs/BEHAVIOUR.md).
        assumeTrue(RedisServer.servesNatively(), "redisson lua: the Lua joins a dlock reader");
        String key = key("rw-shared-read");
        RReadWriteLock rw = redisson(cache).getReadWriteLock(key);
        try (Resp c = server.connect()) {
            assertEquals(1L, c.call("DLOCK.RWLOCK", key, D, "READ", 10_000));
            Map<String, String> held = c.hgetall(key);
            assertFalse(rw.readLock().tryLock(), "no Redisson reader beside a dlock reader");
            assertEquals(held, c.hgetall(key), "the dlock hold unchanged");
            assertEquals(1L, c.call("DLOCK.RENEW", key, D, 10_000), "the dlock reader renews");
            assertEquals(1L, c.call("DLOCK.RELEASE", key, D));
            assertEquals(0L, c.call("EXISTS", key));
            assertTrue(rw.readLock().tryLock(), "free again");
            rw.readLock().unlock();
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonWriterWaitingBehindADlockWriterGetsTheLockByTheTtlItSaw(boolean cache) throws Exception {
        String key = key("rw-wait");
        long lease = 1_500;
        RReadWriteLock rw = redisson(cache).getReadWriteLock(key);
        try (Resp c = server.connect()) {
            long start = System.nanoTime();
            assertEquals(1L, c.call("DLOCK.RWLOCK", key, D, "WRITE", lease));
            Future<Long> waiter;
            try (Monitor monitor = new Monitor(server)) {
                waiter = Waiter.start(threads, rw.writeLock(), 20);
                Await.redissonAsleep(server, monitor, "redisson_rwlock:{" + key + "}", key);
            }
            long released = System.nanoTime();
            assertEquals(1L, c.call("DLOCK.RELEASE", key, D, "WRITE"));
            long after = Waiter.delayMs(waiter, start);
            System.out.printf("rwlock: Redisson writer behind a dlock writer (lease %d ms, released after %d ms) granted %d ms "
                    + "after the dlock grant (redisson %s, useScriptCache=%s)%n", lease, (released - start) / 1_000_000,
                    after, Clients.redissonVersion(), cache);
            // No message on Redisson's rwlock channel: it sleeps on the TTL it saw (the lease).
            assertTrue(after < lease + WakeUpTest.PROMPT_MS, "granted by the lease's end: " + after + " ms");
        }
    }

    private static Map<String, String> withoutLeases(Map<String, String> hash) {
        hash.keySet().removeIf(f -> f.startsWith("lease:"));
        return hash;
    }
}
