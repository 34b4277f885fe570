package io.dlock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.redisson.support.Await;
import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.RedissonMultiLock;
import org.redisson.RedissonRedLock;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * RedissonMultiLock and RedissonRedLock over three independent servers with the module: a dlock
 * holder on any one of them keeps the multi-lock out, the multi-lock keeps dlock out on every
 * one, and a multi-lock waiter gets in once the dlock holder releases.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class MultiLockTest {
    private static final String D = "dlock-multi:1";
    private static final AtomicInteger KEYS = new AtomicInteger();
    private final List<RedisServer> servers = new ArrayList<>();
    private final List<RedissonClient> clients = new ArrayList<>();
    private final ExecutorService threads = Executors.newCachedThreadPool();

    @BeforeAll
    void start() {
        for (int i = 0; i < 3; i++) {
            servers.add(RedisServer.withModule().start());
        }
    }

    @AfterAll
    void stop() {
        threads.shutdownNow();
        try {
            clients.forEach(Clients::close);
        } finally {
            servers.forEach(RedisServer::close);
        }
    }

    /** One lock per server, each through its own client. */
    private RLock[] locks(String key, boolean cache) {
        RLock[] locks = new RLock[servers.size()];
        for (int i = 0; i < locks.length; i++) {
            RedissonClient c = Clients.single(servers.get(i), cache);
            clients.add(c);
            locks[i] = c.getLock(key);
        }
        return locks;
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void multiLock(boolean cache) throws Exception {
        String key = "multi:" + KEYS.incrementAndGet();
        exercise(new RedissonMultiLock(locks(key, cache)), key, true);
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    @SuppressWarnings("deprecation")
    void redLock(boolean cache) throws Exception {
        String key = "red:" + KEYS.incrementAndGet();
        exercise(new RedissonRedLock(locks(key, cache)), key, false);
    }

    /**
     * {@code all}: the lock needs every server (MultiLock); otherwise a majority (RedLock: a
     * dlock holder on one server of three does not keep it out, on two it does).
     */
    private void exercise(RLock multi, String key, boolean all) throws Exception {
        List<Resp> conns = new ArrayList<>();
        for (RedisServer s : servers) {
            conns.add(s.connect());
        }
        try {
            // The multi-lock held: dlock refused on every server.
            assertTrue(multi.tryLock(5, 30, TimeUnit.SECONDS));
            for (Resp c : conns) {
                assertNull(c.call("DLOCK.ACQUIRE", key, D, 10_000), "dlock refused while the multi-lock holds");
            }
            multi.unlock();
            for (Resp c : conns) {
                assertEquals(0L, c.call("EXISTS", key), "unlock freed every server");
            }

            // A dlock holder on the last server (two for RedLock): the multi-lock stays out.
            int held = all ? 1 : 2;
            for (int i = 0; i < held; i++) {
                assertEquals(1L, conns.get(conns.size() - 1 - i).call("DLOCK.ACQUIRE", key, D, 30_000));
            }
            assertFalse(threads.submit(() -> multi.tryLock(300, 30_000, TimeUnit.MILLISECONDS)).get(20, TimeUnit.SECONDS),
                    "refused while dlock holds");
            for (int i = 0; i < conns.size() - held; i++) {
                assertEquals(0L, conns.get(i).call("EXISTS", key), "a failed attempt leaves nothing behind");
            }

            // A multi-lock waiter gets in once dlock releases.
            Future<Boolean> waiter = threads.submit(() -> {
                boolean got = multi.tryLock(20, 30, TimeUnit.SECONDS);
                if (got) {
                    multi.unlock();
                }
                return got;
            });
            // It takes the locks in order: it waits on the first server dlock holds.
            Await.redissonWaiter(servers.get(servers.size() - held), key);
            for (int i = 0; i < held; i++) {
                assertEquals(1L, conns.get(conns.size() - 1 - i).call("DLOCK.RELEASE", key, D));
            }
            assertTrue(waiter.get(25, TimeUnit.SECONDS), "the multi-lock waiter got in");
            for (Resp c : conns) {
                assertEquals(0L, c.call("EXISTS", key));
            }
        } finally {
            conns.forEach(Resp::close);
        }
    }
}
