package io.dlock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.OneServer;
import io.dlock.redisson.support.Resp;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * RLock and DLOCK.ACQUIRE/RELEASE on one key: they exclude each other both ways, and for one
 * owner ({@code <client id>:<thread id>}, as Redisson writes it) they are one reentrant lock.
 */
class LockInteropTest extends OneServer {
    private static final String OTHER = "dlock-owner:1";

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void redissonsOwnerIsClientIdColonThreadId(boolean cache) {
        RedissonClient r = redisson(cache);
        String key = key("owner");
        RLock lock = r.getLock(key);
        lock.lock();
        try {
            assertEquals(Map.of(Clients.owner(r), "1"), server.connect().hgetall(key));
        } finally {
            lock.unlock();
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void anRLockHoldExcludesDlockAcquire(boolean cache) {
        String key = key("rlock-first");
        RLock lock = redisson(cache).getLock(key);
        lock.lock();
        try (var c = server.connect()) {
            assertNull(c.call("DLOCK.ACQUIRE", key, OTHER, 10_000), "refused while Redisson holds");
            lock.unlock();
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, OTHER, 10_000), "granted once Redisson unlocked");
            assertEquals(1L, c.call("DLOCK.RELEASE", key, OTHER));
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aDlockHoldExcludesRLock(boolean cache) throws InterruptedException {
        String key = key("dlock-first");
        RLock lock = redisson(cache).getLock(key);
        try (var c = server.connect()) {
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, OTHER, 10_000));
            assertFalse(lock.tryLock(), "tryLock() refused while dlock holds");
            assertFalse(lock.tryLock(0, 5, TimeUnit.SECONDS), "tryLock(0, lease) refused while dlock holds");
            assertTrue(lock.isLocked());
            assertFalse(lock.isHeldByCurrentThread());
            assertEquals(1L, c.call("DLOCK.RELEASE", key, OTHER));
            assertTrue(lock.tryLock(), "granted once dlock released");
            lock.unlock();
        }
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void oneOwnerReentersAcrossTheTwo(boolean cache) {
        withOwnLock(cache, "reenter", (key, owner, lock, c) -> {
            // Redisson first, then dlock re-enters it.
            lock.lock();
            assertEquals(2L, c.call("DLOCK.ACQUIRE", key, owner, 10_000));
            assertEquals(2, lock.getHoldCount());
            assertEquals(Map.of(owner, "2"), c.hgetall(key));
            assertEquals(0L, c.call("DLOCK.RELEASE", key, owner), "one hold left");
            assertEquals(1, lock.getHoldCount());
            lock.unlock();
            assertEquals(0L, c.call("EXISTS", key));

            // dlock first, then Redisson re-enters it.
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, owner, 10_000));
            assertTrue(lock.isHeldByCurrentThread());
            assertTrue(lock.tryLock(), "Redisson re-enters the dlock hold");
            assertEquals(2, lock.getHoldCount());
            lock.unlock();
            assertEquals(Map.of(owner, "1"), c.hgetall(key));
            assertEquals(1L, c.call("DLOCK.RELEASE", key, owner));
            assertEquals(0L, c.call("EXISTS", key));
        });
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void rlockUnlockFreesADlockHoldAndTheReverse(boolean cache) {
        withOwnLock(cache, "unlock", (key, owner, lock, c) -> {
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, owner, 10_000));
            lock.unlock();
            assertEquals(0L, c.call("EXISTS", key), "RLock.unlock() freed the dlock hold");
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, OTHER, 10_000));
            assertEquals(1L, c.call("DLOCK.RELEASE", key, OTHER));

            lock.lock();
            assertEquals(1L, c.call("DLOCK.RELEASE", key, owner), "DLOCK.RELEASE frees the RLock hold");
            assertEquals(0L, c.call("EXISTS", key));
            assertFalse(lock.isLocked());
            assertEquals(1L, c.call("DLOCK.ACQUIRE", key, OTHER, 10_000));
            assertEquals(1L, c.call("DLOCK.RELEASE", key, OTHER));
        });
    }

    /** What a test does with one Redisson client's lock on a fresh key and a connection. */
    private interface OwnLockBody {
        void run(String key, String owner, RLock lock, Resp c);
    }

    /**
     * Runs {@code body} with a fresh key, the lock a Redisson client has on it, that client's
     * owner id as dlock sees it ({@code <client id>:<thread id>} of this thread) and a
     * connection to the server, closed afterwards.
     */
    private void withOwnLock(boolean cache, String name, OwnLockBody body) {
        RedissonClient r = redisson(cache);
        String key = key(name);
        try (var c = server.connect()) {
            body.run(key, Clients.owner(r), r.getLock(key), c);
        }
    }
}
