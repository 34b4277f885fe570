package io.dlock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.Monitor;
import io.dlock.redisson.support.RedisCluster;
import io.dlock.redisson.support.Resp;
import io.dlock.redisson.support.Waiter;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * RLock on a three-primary cluster with the module. A Redisson waiter subscribes to the unlock
 * channel with SSUBSCRIBE there (Redisson 3.23+ on Redis 7+): DLOCK.RELEASE wakes it within
 * milliseconds (the module publishes to the shard's subscribers too). While the lock's slot moves
 * under the waiter (a dlock holder on the old node, the slot migrated with the hold and its TTL,
 * the holder releasing on the new node), the waiter follows ASK/MOVED and gets the lock, never
 * while dlock holds it, at the latest when the TTL it saw runs out: its shard subscription stayed
 * with the old node (Redis ends it when the node loses the slot; Redisson 3.23.5 logs a decoding
 * error for that message), so no message reaches it.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ClusterTest {
    private static final String D = "dlock-cluster:1";
    private RedisCluster cluster;
    private final ExecutorService threads = Executors.newCachedThreadPool();

    @BeforeAll
    void start() {
        cluster = new RedisCluster(3);
    }

    @AfterAll
    void stop() {
        threads.shutdownNow();
        cluster.close();
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonWaiterGetsTheLockAfterItsSlotMoved(boolean cache) throws Exception {
        waitAcrossAMove(cache, true);
    }

    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void aRedissonWaiterIsWokenByARelease(boolean cache) throws Exception {
        waitAcrossAMove(cache, false);
    }

    private void waitAcrossAMove(boolean cache, boolean move) throws Exception {
        int from = 0;
        int to = move ? 1 : 0;
        String key = cluster.keyOn(from, "moving-" + cache + move);
        int slot = cluster.slot(key);
        // The moved waiter is granted by this lease (see the class comment): kept short.
        long lease = 6_000;
        RedissonClient r = Clients.cluster(cluster.nodes, cache);
        try (Resp src = cluster.nodes.get(from).connect(); Resp dst = cluster.nodes.get(to).connect()) {
            assertEquals(1L, src.call("DLOCK.ACQUIRE", key, D, lease));
            RLock lock = r.getLock(key);
            Future<Long> waiter;
            try (Monitor monitor = new Monitor(cluster.nodes.get(from))) {
                waiter = Waiter.start(threads, lock, 40);
                // Asleep: subscribed, and its attempt after subscribing saw the lease.
                io.dlock.redisson.support.Await.until(Duration.ofSeconds(10), "the Redisson waiter asleep",
                        () -> monitor.clientCommandsOn(key) >= 2);
            }
            if (move) {
                cluster.beginMigration(slot, from, to);
                cluster.migrateKeys(slot, from, to);
                cluster.setOwner(slot, to);
                assertEquals(0L, src.call("CLUSTER", "COUNTKEYSINSLOT", slot), "the hold left the old node");
            }
            long ttl = (Long) dst.call("PTTL", key);
            assertTrue(ttl > 0 && ttl <= lease, "the hold moved with its lease: " + ttl);
            assertTrue(!waiter.isDone(), "still waiting while dlock holds");

            long released = System.nanoTime();
            assertEquals(1L, dst.call("DLOCK.RELEASE", key, D), "the holder releases");
            long delay = Waiter.delayMs(waiter, released);
            System.out.printf("cluster (slot moved: %s): Redisson waiter granted %d ms after the release "
                    + "(lease left %d ms; redisson %s, useScriptCache=%s)%n", move, delay, ttl, Clients.redissonVersion(), cache);
            assertTrue(delay < (move ? ttl : 0) + WakeUpTest.PROMPT_MS, "granted " + delay + " ms after the release");
            assertEquals(0L, dst.call("EXISTS", key), "the waiter unlocked");
        } finally {
            Clients.close(r);
        }
    }
}
