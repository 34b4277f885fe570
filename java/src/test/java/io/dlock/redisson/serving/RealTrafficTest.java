package io.dlock.redisson.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;

import io.dlock.redisson.scripts.CapturedScripts;
import io.dlock.redisson.scripts.ScriptCapture;
import io.dlock.redisson.support.Await;
import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.Monitor;
import io.dlock.redisson.support.OneServer;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;

/**
 * Everything the real Redisson sends for RLock and RReadWriteLock (lock, reentry, tryLock,
 * unlock, forceUnlock, the watchdog's renewals of one and of several locks) is served natively
 * where the module serves the script's role ({@link CapturedScripts#servedNatively}): no such
 * EVAL or EVALSHA reaches the Lua (MONITOR shows what each command became after the module's
 * filter), and {@code dlock_redisson_lua} does not move.
 */
class RealTrafficTest extends OneServer {
    @ParameterizedTest(name = "useScriptCache={0}")
    @ValueSource(booleans = {false, true})
    void everyLockScriptIsServed(boolean useScriptCache) throws Exception {
        RedissonClient r = redisson(useScriptCache);
        try (Resp admin = server.connect(); Monitor monitor = new Monitor(server)) {
            Counters before = Counters.of(admin);
            assertTrue(before.present(), "INFO dlock has no dlock_redisson_served: this module does not serve Redisson's scripts");
            String name = key("traffic");
            RLock lock = r.getLock(name);
            assertTrue(lock.tryLock(1, 10, TimeUnit.SECONDS));
            lock.lock(10, TimeUnit.SECONDS);
            lock.unlock();
            lock.unlock();
            // the watchdog's renewals: of one lock, then of several locks and read-write locks at once
            long locked = System.nanoTime();
            lock.lock();
            Watchdog.awaitRenewal(admin, name, locked);
            String rwName = key("traffic-rw");
            RReadWriteLock rw = r.getReadWriteLock(rwName);
            List<RLock> held = new ArrayList<>(List.of(lock, r.getLock(key("traffic-2")), rw.readLock()));
            locked = System.nanoTime();
            for (RLock l : held.subList(1, held.size())) {
                l.lock();
            }
            Watchdog.awaitRenewal(admin, rwName, locked);
            for (RLock l : held) {
                l.unlock();
            }
            locked = System.nanoTime();
            rw.writeLock().lock();
            Watchdog.awaitRenewal(admin, rwName, locked);
            rw.writeLock().unlock();
            rw.writeLock().lock(10, TimeUnit.SECONDS);
            rw.writeLock().forceUnlock();
            rw.readLock().lock(10, TimeUnit.SECONDS);
            rw.readLock().forceUnlock();
            lock.lock(10, TimeUnit.SECONDS);
            lock.forceUnlock();
            admin.ok("ECHO", "traffic-end");
            Await.until(Duration.ofSeconds(10), "MONITOR at the end", () -> monitor.lines().stream().anyMatch(l -> l.contains("traffic-end")));
            CapturedScripts scripts = CapturedScripts.underTest();
            List<String> lua = monitor.lines().stream()
                    .filter(l -> !l.contains(" lua]"))
                    .filter(l -> l.toUpperCase().contains("] \"EVAL"))
                    .filter(l -> {
                        // EVALSHA "<sha>" or EVAL "<text>": a script of a role the module serves?
                        List<byte[]> args = ScriptCapture.parseMonitorLine(l);
                        String first = new String(args.get(1), StandardCharsets.UTF_8);
                        String sha = new String(args.get(0), StandardCharsets.UTF_8).toUpperCase().startsWith("EVALSHA")
                                ? first.toLowerCase() : CapturedScripts.sha1(first);
                        CapturedScripts.Script s = scripts.bySha(sha);
                        return s == null || CapturedScripts.servedNatively(s.name());
                    })
                    .map(l -> l.length() > 160 ? l.substring(0, 160) + "..." : l)
                    .toList();
            Counters after = Counters.of(admin);
            if (RedisServer.servesNatively()) {
                assertEquals(List.of(), lua, "scripts that reached the Lua (" + before + " -> " + after + ")");
                assertEquals(before.lua(), after.lua(), "recognised but run as the Lua");
            } else {
                assertTrue(lua.size() >= 21, "redisson lua: the lock scripts reach the Lua as EVAL/EVALSHA: " + lua);
            }
            // RLock's scripts: tryLock x2, unlock x2, lock() and a renewal, the second lock and the
            // renewal of both, two unlocks, lock and forceUnlock (12); RReadWriteLock's: read lock,
            // its renewal, read unlock, write lock and unlock, write lock and forceUnlock, read lock
            // and forceUnlock (9)
            after.assertServedSince(before, 21);
        }
    }
}
