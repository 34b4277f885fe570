package io.dlock.redisson.scripts;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Objects;
import java.util.Random;
import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;

/**
 * Proof by difference: the same random sequences of Redisson's own lock scripts (the texts
 * captured from the Redisson jars, {@link ScriptCapture}; every version captured in
 * target/redisson) sent by EVAL and by EVALSHA to a plain server (the real Lua) and to a server
 * with the module serving them ({@code redisson native}). After every step: the same reply (the
 * same value, times within {@link #TOLERANCE_MS}, the same error code), the same keyspace (keys,
 * types, values, expiries), the same messages (PUBLISH, SPUBLISH, keyspace and keyevent
 * notifications). And {@code dlock_redisson_served} grows by one per call, so the test cannot
 * pass through a fallback to Lua. At the end, a replica without the module and a restart from
 * the module server's AOF without the module hold the same data.
 *
 * <p>System property {@code dlock.diff.seed} replays a run (the seed is in every failure).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class RedissonScriptsDiffTest {
    /** Two servers run each call a moment apart: PTTL replies and expiries may differ this much. */
    static final long TOLERANCE_MS = 500;
    private static final int SEQUENCES = 4;
    private static final int STEPS = 50;
    private static final String[] NOTIFY = {"--notify-keyspace-events", "KEA"};

    private List<CapturedScripts> versions;
    private final long seed = Long.getLong("dlock.diff.seed", System.nanoTime());
    private final Deque<String> history = new ArrayDeque<>();
    /** What the sequences exercised, checked at the end so that a comparison of nothing cannot pass. */
    private int notifications;
    private int published;
    private int sharded;
    private int errors;

    @BeforeAll
    void scripts() throws Exception {
        CapturedScripts.underTest();
        versions = CapturedScripts.all();
        assertFalse(versions.isEmpty());
    }

    /** {@code dlock_redisson_served} of INFO dlock; missing, the module does not serve Redisson's scripts at all. */
    static long served(Resp c) {
        String v = c.info("dlock").get("dlock_redisson_served");
        assertNotNull(v, "INFO dlock has no dlock_redisson_served: this module does not serve Redisson's scripts natively");
        return Long.parseLong(v);
    }

    @Test
    void nativeServingMatchesTheLua() throws Exception {
        Path aofDir = Files.createTempDirectory("dlock-diff-aof-");
        try (RedisServer plain = RedisServer.plain().args(NOTIFY).start();
                RedisServer module = RedisServer.withModule().moduleArgs("redisson", "native").args(NOTIFY)
                        .args("--appendonly", "yes", "--appendfsync", "always", "--dir", aofDir.toString()).start();
                RedisServer replica = RedisServer.plain().args("--replicaof", RedisServer.HOST, String.valueOf(module.port())).start();
                Resp p = plain.connect();
                Resp m = module.connect();
                Messages pm = new Messages(plain, ScriptCalls.channels());
                Messages mm = new Messages(module, ScriptCalls.channels())) {
            long served = served(m);
            long lua = Long.parseLong(m.info("dlock").getOrDefault("dlock_redisson_lua", "0"));
            Random random = new Random(seed);
            ScriptCalls gen = new ScriptCalls(random);
            Map<String, int[]> servedByRole = new TreeMap<>();
            int calls = 0;
            for (CapturedScripts v : versions) {
                for (CapturedScripts.Script s : v.scripts()) {
                    assertEquals(s.sha1(), p.ok("SCRIPT", "LOAD", s.text()));
                    assertEquals(s.sha1(), m.ok("SCRIPT", "LOAD", s.text()));
                }
                List<CapturedScripts.Script> weighted = new ArrayList<>();
                for (CapturedScripts.Script s : v.scripts()) {
                    int w = s.name().endsWith("tryLock") ? 3 : 1;
                    for (int i = 0; i < w; i++) {
                        weighted.add(s);
                    }
                }
                for (int seq = 0; seq < SEQUENCES; seq++) {
                    history.clear();
                    step(p, m, pm, mm, v, "FLUSHALL", new Object[] {"FLUSHALL"});
                    for (int i = 0; i < STEPS; i++) {
                        if (random.nextInt(10) == 0) {
                            Object[] cmd = gen.disturbance();
                            step(p, m, pm, mm, v, String.join(" ", strings(cmd)), cmd);
                            continue;
                        }
                        ScriptCalls.Call call = gen.next(weighted.get(random.nextInt(weighted.size())));
                        Object reply = step(p, m, pm, mm, v, call.toString(), call.command());
                        calls++;
                        Map<String, String> info = m.info("dlock");
                        long nowServed = Long.parseLong(info.get("dlock_redisson_served"));
                        long nowLua = Long.parseLong(info.getOrDefault("dlock_redisson_lua", "0"));
                        // A call of a role the module serves is recognised (counted once, served or
                        // as the Lua); one the Lua answers with an error (a wrong type under the key)
                        // may run as the Lua, every other one must be served. Other roles: counted
                        // at most once.
                        int[] count = servedByRole.computeIfAbsent(
                                v.redisson() + " " + call.script().name() + (call.evalsha() ? " by EVALSHA" : " by EVAL"), k -> new int[3]);
                        long moved = nowServed - served + nowLua - lua;
                        if (moved > 1) {
                            failAt(v, "one call counted " + moved + " times");
                        }
                        boolean mustServe = !(reply instanceof Resp.Error);
                        count[0] += moved == 1 && (nowServed > served || !mustServe) ? 1 : 0;
                        count[1]++;
                        count[2] += moved == 1 ? 0 : 1;
                        served = nowServed;
                        lua = nowLua;
                    }
                }
            }
            assertTrue(notifications > 0 && published > 0 && sharded > 0 && errors > 0,
                    "the sequences exercised too little: " + notifications + " notifications, " + published
                            + " PUBLISH, " + sharded + " SPUBLISH, " + errors + " error replies");
            sameDataWithoutTheModule(m, replica, module, aofDir);
            List<String> notServed = new ArrayList<>();
            servedByRole.forEach((role, c) -> {
                String line = role + ": " + c[0] + " of " + c[1] + " served" + (c[2] > 0 ? " (" + c[2] + " not recognised at all)" : "");
                if (CapturedScripts.servedNatively(role.split(" ")[1])) {
                    if (c[0] != c[1]) {
                        notServed.add(line);
                    }
                } else {
                    System.out.println("left to the Lua, same behaviour: " + line);
                }
            });
            assertEquals(List.of(), notServed, calls + " calls, each served natively (or run as the Lua where the Lua answers an error)?");
        } finally {
            try (var files = Files.walk(aofDir)) {
                files.sorted((a, b) -> b.compareTo(a)).forEach(f -> f.toFile().delete());
            }
        }
    }

    /**
     * The one intended difference: EVALSHA of a lock script the server's script cache does not
     * hold (after a restart or SCRIPT FLUSH) is served, where the Lua answers NOSCRIPT and Redisson
     * then loads the script and sends it again: the user sees the same result, one round trip sooner.
     */
    @Test
    void evalshaOfAnUnloadedLockScriptIsServed() throws Exception {
        CapturedScripts s = CapturedScripts.underTest();
        CapturedScripts.Script tryLock = s.role("lock.tryLock");
        Object[] cmd = {"EVALSHA", tryLock.sha1(), 1, "unloaded", "30000", "u1:1"};
        // Native serving named: this difference is what it adds (also under DLOCK_REDISSON=lua).
        try (RedisServer plain = RedisServer.plain().start();
                RedisServer module = RedisServer.withModule().moduleArgs("redisson", "native").start();
                Resp p = plain.connect(); Resp m = module.connect()) {
            assertEquals("NOSCRIPT", ((Resp.Error) p.call(cmd)).code());
            long before = served(m);
            assertEquals(null, m.call(cmd));
            assertEquals(before + 1, served(m));
            assertEquals(List.of(0L), m.ok("SCRIPT", "EXISTS", tryLock.sha1()), "served without loading the script");
        }
    }

    /** One command on both servers, then the reply, the messages and the keyspace compared. */
    private Object step(Resp p, Resp m, Messages pm, Messages mm, CapturedScripts v, String what, Object[] cmd) {
        history.addLast(what);
        if (history.size() > 12) {
            history.removeFirst();
        }
        Object rp = p.call(cmd);
        Object rm = m.call(cmd);
        if (!sameReply(rp, rm)) {
            failAt(v, "reply: Lua " + rp + ", module " + rm);
        }
        List<String> mp = pm.drain();
        List<String> mmsgs = mm.drain();
        if (!mp.equals(mmsgs)) {
            failAt(v, "messages: Lua " + mp + ", module " + mmsgs);
        }
        for (String msg : mp) {
            if (msg.startsWith("smessage ")) {
                sharded++;
            } else if (msg.startsWith("pmessage __key")) {
                notifications++;
            } else {
                published++;
            }
        }
        if (rp instanceof Resp.Error) {
            errors++;
        }
        List<String> d = Keyspace.of(p).differences(Keyspace.of(m), TOLERANCE_MS);
        if (!d.isEmpty()) {
            failAt(v, "keyspace (Lua vs module): " + d);
        }
        return rp;
    }

    private void failAt(CapturedScripts v, String what) {
        fail("Redisson " + v.redisson() + ", seed " + seed + " (-Ddlock.diff.seed=" + seed + "): " + what
                + "\nlast steps:\n  " + String.join("\n  ", history));
    }

    /** The same reply: equal values, times (>= 1000 ms on both sides) within the tolerance, errors by their code. */
    static boolean sameReply(Object a, Object b) {
        if (a instanceof Resp.Error x && b instanceof Resp.Error y) {
            return x.code().equals(y.code());
        }
        if (a instanceof Long x && b instanceof Long y) {
            return x.equals(y) || (x >= 1000 && y >= 1000 && Math.abs(x - y) <= TOLERANCE_MS);
        }
        if (a instanceof List<?> x && b instanceof List<?> y) {
            if (x.size() != y.size()) {
                return false;
            }
            for (int i = 0; i < x.size(); i++) {
                if (!sameReply(x.get(i), y.get(i))) {
                    return false;
                }
            }
            return true;
        }
        return Objects.equals(a, b);
    }

    /**
     * A replica without the module holds what the module server holds, and so does a server
     * without the module started from the module server's AOF.
     */
    private void sameDataWithoutTheModule(Resp m, RedisServer replica, RedisServer module, Path aofDir) {
        Keyspace before = Keyspace.of(m);
        assertFalse(before.keys().isEmpty(), "the last sequence left no keys to compare");
        assertEquals(1L, m.ok("WAIT", 1, 10_000), "the replica did not acknowledge the writes");
        try (Resp r = replica.connect()) {
            List<String> d = before.differences(Keyspace.of(r), TOLERANCE_MS);
            assertEquals(List.of(), d, "replica without the module (seed " + seed + ")");
        }
        module.close();
        try (RedisServer restarted = RedisServer.plain().args("--appendonly", "yes", "--dir", aofDir.toString()).start();
                Resp r = restarted.connect()) {
            List<String> d = before.differences(Keyspace.of(r), TOLERANCE_MS);
            assertEquals(List.of(), d, "restart from the AOF without the module (seed " + seed + "):\n" + restarted.log());
        }
    }

    private static List<String> strings(Object[] cmd) {
        List<String> s = new ArrayList<>();
        for (Object o : cmd) {
            s.add(String.valueOf(o));
        }
        return s;
    }
}
