package io.dlock.redisson.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import io.dlock.redisson.scripts.CapturedScripts;
import io.dlock.redisson.support.RedisCluster;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;

/**
 * On a cluster of three masters with the module serving Redisson's scripts, a script gets the
 * same routing replies as any Lua script with the same keys (the reference, {@code return 1}):
 * the same MOVED to the slot's owner, the same CROSSSLOT for keys of two slots, the same ASK
 * while the slot migrates and the key is absent; and on the owner it is served.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ClusterRoutingTest {
    private static final String REFERENCE = "return 1";
    private RedisCluster cluster;
    private final List<Resp> conns = new ArrayList<>();
    private CapturedScripts scripts;

    @BeforeAll
    void cluster() throws Exception {
        scripts = CapturedScripts.underTest();
        cluster = new RedisCluster(3);
        for (RedisServer n : cluster.nodes) {
            Resp c = n.connect();
            conns.add(c);
            for (CapturedScripts.Script s : scripts.scripts()) {
                c.ok("SCRIPT", "LOAD", s.text());
            }
            c.ok("SCRIPT", "LOAD", REFERENCE);
        }
    }

    @AfterAll
    void stop() {
        conns.forEach(Resp::close);
        cluster.close();
    }

    /** The script by EVAL or EVALSHA, and the reference Lua sent the same way with the same keys. */
    private Object[][] pair(CapturedScripts.Script s, boolean evalsha, List<String> keys, List<String> args) {
        List<Object> script = new ArrayList<>(List.of(evalsha ? "EVALSHA" : "EVAL", evalsha ? s.sha1() : s.text(), keys.size()));
        List<Object> ref = new ArrayList<>(List.of(evalsha ? "EVALSHA" : "EVAL", evalsha ? CapturedScripts.sha1(REFERENCE) : REFERENCE, keys.size()));
        script.addAll(keys);
        script.addAll(args);
        ref.addAll(keys);
        ref.addAll(args);
        return new Object[][] {script.toArray(), ref.toArray()};
    }

    private void sameAsReference(int node, Object[][] pair, String expectCode) {
        // the reference first: a script wrongly run here would create the key the ASK check looks for
        Object ref = conns.get(node).call(pair[1]);
        Object got = conns.get(node).call(pair[0]);
        assertInstanceOf(Resp.Error.class, ref, "the reference was expected to be redirected or refused");
        assertEquals(expectCode, ((Resp.Error) ref).code());
        assertEquals(ref, got, "node " + node + ": " + pair[0][0]);
    }

    @ParameterizedTest(name = "EVALSHA={0}")
    @ValueSource(booleans = {false, true})
    void routingRepliesMatchTheLua(boolean evalsha) {
        CapturedScripts.Script tryLock = scripts.role("lock.tryLock");
        CapturedScripts.Script unlock = scripts.role("lock.unlock");
        String onOne = cluster.keyOn(1, "route:" + evalsha);
        String alsoOnOne = cluster.keyOn(1, "route:" + evalsha + ":other");
        List<String> tryArgs = List.of("30000", "u1:1");
        // MOVED: asked of node 0 for a key of node 1
        sameAsReference(0, pair(tryLock, evalsha, List.of(onOne), tryArgs), "MOVED");
        // CROSSSLOT: an unlock whose channel is of another slot (Redisson's never is: {name})
        List<String> unlockKeys = new ArrayList<>(List.of(onOne, "redisson_lock__channel:{" + alsoOnOne + "}"));
        List<String> unlockArgs = new ArrayList<>(List.of("0", "30000", "u1:1"));
        if (unlock.keyCount() >= 3) {
            unlockKeys.add("redisson_unlock_latch:{" + onOne + "}:r1");
        }
        if (unlock.argCount() >= 4) {
            unlockArgs.add("PUBLISH");
        }
        if (unlock.argCount() >= 5) {
            unlockArgs.add("10000");
        }
        if (cluster.slot(onOne) != cluster.slot(alsoOnOne)) {
            sameAsReference(1, pair(unlock, evalsha, unlockKeys, unlockArgs), "CROSSSLOT");
        }
        // served on the owner
        Counters before = Counters.of(conns.get(1));
        assertEquals(null, conns.get(1).ok(pair(tryLock, evalsha, List.of(onOne), tryArgs)[0]));
        Counters after = Counters.of(conns.get(1));
        after.assertServedSince(before, 1);
        assertTrue(after.served() - before.served() <= 1, "served more than once: " + before + " -> " + after);
        conns.get(1).ok("DEL", onOne);
    }

    @ParameterizedTest(name = "EVALSHA={0}")
    @ValueSource(booleans = {false, true})
    void askWhileTheSlotMigrates(boolean evalsha) {
        CapturedScripts.Script tryLock = scripts.role("lock.tryLock");
        String name = cluster.keyOn(2, "ask:" + evalsha);
        int slot = cluster.slot(name);
        cluster.beginMigration(slot, 2, 0);
        try {
            // the key is absent on the migrating node: ASK, for the script as for the reference
            sameAsReference(2, pair(tryLock, evalsha, List.of(name), List.of("30000", "u1:1")), "ASK");
        } finally {
            cluster.setOwner(slot, 2);
        }
    }
}
