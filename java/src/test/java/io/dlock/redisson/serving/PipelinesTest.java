package io.dlock.redisson.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

import io.dlock.redisson.scripts.CapturedScripts;
import io.dlock.redisson.support.Await;
import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.Monitor;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;

/**
 * Redisson's scripts served natively inside MULTI/EXEC and in pipelines that end with WAIT: what
 * Redisson sends when it has replicas ({@code checkLockSyncedSlaves}, the default: the script and
 * a WAIT in one batch) keeps working, and a transaction of scripts answers as it does with the Lua.
 */
class PipelinesTest {
    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void redissonWithAReplicaWaitsForIt(boolean useScriptCache) throws Exception {
        try (RedisServer master = RedisServer.withModule().start();
                RedisServer replica = RedisServer.withModule().args("--replicaof", RedisServer.HOST, String.valueOf(master.port())).start();
                Resp admin = master.connect();
                Resp onReplica = replica.connect();
                Monitor monitor = new Monitor(master)) {
            awaitLink(onReplica);
            Counters before = Counters.of(admin);
            Config config = Clients.config(useScriptCache);
            config.setCheckLockSyncedSlaves(true);
            config.useMasterSlaveServers().setMasterAddress(master.address()).addSlaveAddress(replica.address())
                    .setMasterConnectionPoolSize(4).setMasterConnectionMinimumIdleSize(1)
                    .setSlaveConnectionPoolSize(2).setSlaveConnectionMinimumIdleSize(1)
                    .setSubscriptionConnectionPoolSize(2).setSubscriptionConnectionMinimumIdleSize(1);
            RedissonClient r = Redisson.create(config);
            try {
                RLock lock = r.getLock("pipe:lock");
                lock.lock(30, TimeUnit.SECONDS);
                // the lock's write reached the replica before lock() returned (Redisson waited for it)
                Map<String, String> held = onReplica.hgetall("pipe:lock");
                assertEquals(Map.of(Clients.owner(r), "1"), held);
                lock.unlock();
                RReadWriteLock rw = r.getReadWriteLock("pipe:rw");
                rw.writeLock().lock(30, TimeUnit.SECONDS);
                rw.writeLock().unlock();
                assertEquals(0L, onReplica.ok("EXISTS", "pipe:lock"));
            } finally {
                Clients.close(r);
            }
            admin.ok("ECHO", "pipelines-test-end");
            Await.until(Duration.ofSeconds(10), "MONITOR at the end", () -> monitor.lines().stream().anyMatch(l -> l.contains("pipelines-test-end")));
            List<String> seen = new ArrayList<>();
            boolean waited = false;
            for (String line : monitor.lines()) {
                String upper = line.toUpperCase();
                waited |= upper.contains("\"WAIT\"") || upper.contains("\"WAITAOF\"");
                if (upper.contains("\"EVAL") || upper.contains("\"WAIT") || upper.contains("\"MULTI") || upper.contains("\"EXEC")) {
                    seen.add(line.length() > 120 ? line.substring(0, 120) + "..." : line);
                }
            }
            assertTrue(waited, "Redisson sent no WAIT/WAITAOF: the pipeline under test did not happen:\n" + String.join("\n", seen));
            Counters after = Counters.of(admin);
            after.assertServedSince(before, 2);
        }
    }

    private static void awaitLink(Resp replica) {
        Await.until(Duration.ofSeconds(20), "the replica's link up", () -> "up".equals(replica.info("replication").get("master_link_status")));
    }

    /**
     * MULTI with Redisson's scripts (by EVAL and EVALSHA) answers EXEC as the Lua does, leaves the
     * same keys, and each script counts as served; a WATCHed key changed meanwhile aborts it on both.
     */
    @Test
    void multiExecAnswersAsTheLua() throws Exception {
        CapturedScripts s = CapturedScripts.underTest();
        CapturedScripts.Script tryLock = s.role("lock.tryLock");
        CapturedScripts.Script forceUnlock = s.role("lock.forceUnlock");
        List<Object[]> tx = List.of(
                new Object[] {"EVAL", tryLock.text(), 1, "tx:a", "30000", "u1:1"},
                new Object[] {"EVALSHA", tryLock.sha1(), 1, "tx:a", "30000", "u1:1"},
                new Object[] {"EVALSHA", tryLock.sha1(), 1, "tx:a", "30000", "u2:1"},
                new Object[] {"SET", "tx:b", "x"},
                new Object[] {"EVAL", tryLock.text(), 1, "tx:b", "30000", "u1:1"},
                new Object[] {"EVALSHA", forceUnlock.sha1(), 2, "tx:a", "redisson_lock__channel:{tx:a}", "0", "PUBLISH"});
        List<Object> replies = new ArrayList<>();
        List<Counters> counted = new ArrayList<>();
        for (boolean module : new boolean[] {false, true}) {
            try (RedisServer server = (module ? RedisServer.withModule() : RedisServer.plain()).start(); Resp c = server.connect()) {
                c.ok("SCRIPT", "LOAD", forceUnlock.text());
                Counters before = module ? Counters.of(c) : null;
                c.ok("MULTI");
                for (Object[] cmd : tx) {
                    assertEquals("QUEUED", c.ok(cmd));
                }
                replies.add(c.ok("EXEC"));
                replies.add(c.hgetall("tx:a").toString() + " " + c.ok("GET", "tx:b"));
                // a pipeline: the script and a WAIT sent together, read after
                c.send("EVALSHA", tryLock.sha1(), 1, "tx:c", "30000", "u1:1");
                c.send("WAIT", 0, 0);
                replies.add(List.of(String.valueOf(c.read()), String.valueOf(c.read())));
                // WATCH: a change to the key aborts the transaction of scripts
                c.ok("WATCH", "tx:c");
                try (Resp other = server.connect()) {
                    other.ok("DEL", "tx:c");
                }
                c.ok("MULTI");
                c.ok("EVAL", tryLock.text(), 1, "tx:c", "30000", "u2:1");
                assertNull(c.ok("EXEC"));
                if (module) {
                    counted.add(before);
                    counted.add(Counters.of(c));
                }
            }
        }
        assertEquals(replies.subList(0, 3).toString().replaceAll("\\b\\d{4,5}\\b", "T"),
                replies.subList(3, 6).toString().replaceAll("\\b\\d{4,5}\\b", "T"), "Lua then module");
        Counters before = counted.get(0);
        Counters after = counted.get(1);
        // five scripts in MULTI (one on a wrong type may run as the Lua), one pipelined
        if (RedisServer.servesNatively()) {
            assertEquals(6, after.recognisedSince(before), before + " -> " + after);
        }
        after.assertServedSince(before, 5);
    }
}
