package io.dlock.redisson.scripts;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

import io.dlock.redisson.support.Await;
import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Monitor;

/**
 * Captures the lock scripts of the Redisson on the classpath: runs real RLock and RReadWriteLock
 * operations (lock, tryLock, reentry, unlock, forceUnlock, a waiter woken by an unlock, the
 * watchdog renewing one lock and several at once) against a plain server, with useScriptCache
 * false then true, and reads every EVAL / SCRIPT LOAD / EVALSHA on MONITOR. A text is named by
 * the operation during which it first appeared; operations that other threads run meanwhile (a
 * waiter, the watchdog) only confirm texts already named.
 */
public final class ScriptCapture {
    /** Short, so that the watchdog renews (every third of it) within the capture's pauses. */
    private static final long WATCHDOG_MS = 1_500;
    private static final long RENEWAL_PAUSE_MS = 1_300;

    private final RedisServer server;
    private final Monitor monitor;
    /** Lines of {@link #monitor} already read by {@link #phase}. */
    private int read;
    private final boolean batchedRenewal;
    private final Map<String, String> textBySha = new HashMap<>();
    private final Map<String, String> nameByText = new LinkedHashMap<>();
    private final Map<String, List<String>> alsoByText = new HashMap<>();
    private final Map<String, List<String>> exampleByText = new HashMap<>();
    private int markers;

    private ScriptCapture(RedisServer server, String version) {
        this.server = server;
        this.monitor = new Monitor(server);
        this.batchedRenewal = CapturedScripts.compareVersions(version, "3.44.0") >= 0;
    }

    /** Captures the scripts of {@code version} (the Redisson on the classpath) and writes its file. */
    public static CapturedScripts capture(String version) throws Exception {
        try (RedisServer server = RedisServer.plain().start()) {
            ScriptCapture c = new ScriptCapture(server, version);
            try {
                for (boolean cache : new boolean[] {false, true}) {
                    c.run(cache);
                }
            } finally {
                c.monitor.close();
            }
            List<CapturedScripts.Script> scripts = new ArrayList<>();
            c.nameByText.forEach((text, name) -> scripts.add(new CapturedScripts.Script(name, CapturedScripts.sha1(text), text,
                    c.alsoByText.getOrDefault(text, List.of()), c.exampleByText.getOrDefault(text, List.of()))));
            CapturedScripts captured = new CapturedScripts(version, scripts);
            captured.write();
            return captured;
        }
    }

    private String renewal(String lock) {
        if (!batchedRenewal) {
            return lock + ".renew";
        }
        return lock.equals("rwlock.read") ? "rwlock.renewBatch" : lock + ".renewBatch";
    }

    private void run(boolean cache) throws Exception {
        Config config = Clients.config(cache);
        config.setLockWatchdogTimeout(WATCHDOG_MS);
        RedissonClient r = Clients.single(server, config, 4);
        ExecutorService other = Executors.newSingleThreadExecutor();
        try {
            server.call("SCRIPT", "FLUSH");
            phase();
            lock(r, other);
            readWriteLock(r, other);
        } finally {
            other.shutdownNow();
            Clients.close(r);
        }
        known(phase());
    }

    private void lock(RedissonClient r, ExecutorService other) throws Exception {
        RLock l = r.getLock("capture:lock");
        l.tryLock(0, 10, TimeUnit.SECONDS);
        name("lock.tryLock", phase());
        l.lock(10, TimeUnit.SECONDS);
        name("lock.tryLock", phase());
        l.unlock();
        name("lock.unlock", phase());
        l.unlock();
        name("lock.unlock", phase());
        try {
            l.unlock();
        } catch (IllegalMonitorStateException expected) {
            // unlock of a lock not held: the script answers nil
        }
        name("lock.unlock", phase());
        l.lock(10, TimeUnit.SECONDS);
        phase();
        l.forceUnlock();
        name("lock.forceUnlock", phase());
        l.forceUnlock();
        name("lock.forceUnlock", phase());
        renewed(renewal("lock"), List.of(l));
        List<RLock> many = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            many.add(r.getLock("capture:many:" + i));
        }
        renewed(renewal("lock"), many);
        l.lock(10, TimeUnit.SECONDS);
        phase();
        Future<Boolean> waiter = other.submit(() -> {
            RLock w = r.getLock("capture:lock");
            boolean got = w.tryLock(5, 10, TimeUnit.SECONDS);
            if (got) {
                w.unlock();
            }
            return got;
        });
        Thread.sleep(200);
        known(phase());
        l.unlock();
        if (!waiter.get(10, TimeUnit.SECONDS)) {
            throw new IllegalStateException("the waiter did not get the lock");
        }
        known(phase());
    }

    private void readWriteLock(RedissonClient r, ExecutorService other) throws Exception {
        RReadWriteLock rw = r.getReadWriteLock("capture:rw");
        rw.readLock().lock(10, TimeUnit.SECONDS);
        name("rwlock.read.tryLock", phase());
        rw.readLock().lock(10, TimeUnit.SECONDS);
        name("rwlock.read.tryLock", phase());
        other.submit(() -> {
            RLock rl = r.getReadWriteLock("capture:rw").readLock();
            rl.lock(10, TimeUnit.SECONDS);
            rl.unlock();
            return null;
        }).get(10, TimeUnit.SECONDS);
        known(phase());
        rw.readLock().unlock();
        name("rwlock.read.unlock", phase());
        rw.readLock().unlock();
        name("rwlock.read.unlock", phase());
        rw.writeLock().lock(10, TimeUnit.SECONDS);
        name("rwlock.write.tryLock", phase());
        rw.writeLock().lock(10, TimeUnit.SECONDS);
        name("rwlock.write.tryLock", phase());
        rw.readLock().lock(10, TimeUnit.SECONDS);
        name("rwlock.read.tryLock", phase());
        rw.readLock().unlock();
        name("rwlock.read.unlock", phase());
        rw.writeLock().unlock();
        name("rwlock.write.unlock", phase());
        rw.writeLock().unlock();
        name("rwlock.write.unlock", phase());
        rw.readLock().lock(10, TimeUnit.SECONDS);
        phase();
        rw.readLock().forceUnlock();
        name("rwlock.read.forceUnlock", phase());
        rw.writeLock().lock(10, TimeUnit.SECONDS);
        phase();
        rw.writeLock().forceUnlock();
        name("rwlock.write.forceUnlock", phase());
        renewed(renewal("rwlock.read"), List.of(rw.readLock()));
        List<RLock> reads = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            reads.add(r.getReadWriteLock("capture:rwmany:" + i).readLock());
        }
        renewed(renewal("rwlock.read"), reads);
        renewed(renewal("rwlock.write"), List.of(rw.writeLock()));
    }

    /** Holds {@code locks} with the watchdog (no lease) until it renewed them, then unlocks them. */
    private void renewed(String role, List<RLock> locks) throws InterruptedException {
        for (RLock x : locks) {
            x.lock();
        }
        phase();
        Thread.sleep(RENEWAL_PAUSE_MS);
        name(role, phase());
        for (RLock x : locks) {
            x.unlock();
        }
        phase();
    }

    /** Texts first seen during an operation are that operation's. */
    private void name(String role, List<String> texts) {
        for (String t : texts) {
            String have = nameByText.get(t);
            if (have == null || have.equals("other")) {
                nameByText.put(t, role);
            } else if (role.startsWith("rwlock.write.renew") && !have.equals(role)) {
                // the write lock's watchdog sends the plain lock's renewal text: a share worth
                // recording (other sightings across phases are the watchdog or a waiter at work)
                List<String> also = alsoByText.computeIfAbsent(t, x -> new ArrayList<>());
                if (!also.contains(role)) {
                    also.add(role);
                }
            }
        }
    }

    /** A phase where other threads ran: a text not named yet is kept as "other" until its own phase names it. */
    private void known(List<String> texts) {
        for (String t : texts) {
            nameByText.putIfAbsent(t, "other");
        }
    }

    /**
     * Ends a phase: sends an ECHO marker, reads MONITOR up to it, and returns the distinct script
     * texts sent since the previous marker (EVALSHA resolved through the texts seen loaded or evaluated).
     */
    private List<String> phase() {
        String marker = "dlock-capture-" + (markers++);
        server.call("ECHO", marker);
        Await.until(Duration.ofSeconds(10), "MONITOR showing " + marker,
                () -> monitor.lines().stream().skip(read).anyMatch(l -> l.endsWith("\"" + marker + "\"")));
        List<String> lines = monitor.lines();
        List<String> texts = new ArrayList<>();
        while (true) {
            List<byte[]> cmd = parseMonitorLine(lines.get(read++));
            if (cmd == null || cmd.isEmpty()) {
                continue;
            }
            String name = new String(cmd.get(0), StandardCharsets.UTF_8).toLowerCase();
            if (name.equals("echo") && cmd.size() == 2 && new String(cmd.get(1), StandardCharsets.UTF_8).equals(marker)) {
                return texts;
            }
            String text = null;
            int argsFrom = 2;
            if (name.equals("eval") || name.equals("eval_ro")) {
                text = new String(cmd.get(1), StandardCharsets.UTF_8);
            } else if (name.equals("evalsha") || name.equals("evalsha_ro")) {
                text = textBySha.get(new String(cmd.get(1), StandardCharsets.UTF_8).toLowerCase());
            } else if (name.equals("script") && cmd.size() == 3 && new String(cmd.get(1), StandardCharsets.UTF_8).equalsIgnoreCase("load")) {
                text = new String(cmd.get(2), StandardCharsets.UTF_8);
                argsFrom = -1;
            }
            if (text == null) {
                continue;
            }
            textBySha.put(CapturedScripts.sha1(text), text);
            if (argsFrom > 0 && !exampleByText.containsKey(text)) {
                List<String> example = new ArrayList<>();
                for (byte[] a : cmd.subList(argsFrom, cmd.size())) {
                    example.add(new String(a, StandardCharsets.UTF_8));
                }
                exampleByText.put(text, example);
            }
            if (!texts.contains(text)) {
                texts.add(text);
            }
        }
    }

    /** A MONITOR line, {@code <time> [<db> <client>] "arg" "arg"...}, as its arguments (sdscatrepr quoting undone). */
    public static List<byte[]> parseMonitorLine(String line) {
        int at = line.indexOf("] ");
        if (at < 0) {
            return null;
        }
        List<byte[]> args = new ArrayList<>();
        int i = at + 2;
        int n = line.length();
        while (i < n) {
            if (line.charAt(i) == ' ') {
                i++;
                continue;
            }
            if (line.charAt(i) != '"') {
                return null;
            }
            i++;
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            while (line.charAt(i) != '"') {
                char c = line.charAt(i);
                if (c != '\\') {
                    b.write(c);
                    i++;
                    continue;
                }
                char e = line.charAt(i + 1);
                switch (e) {
                    case 'n' -> b.write('\n');
                    case 'r' -> b.write('\r');
                    case 't' -> b.write('\t');
                    case 'a' -> b.write(7);
                    case 'b' -> b.write(8);
                    case 'x' -> {
                        b.write(Integer.parseInt(line.substring(i + 2, i + 4), 16));
                        i += 2;
                    }
                    default -> b.write(e);
                }
                i += 2;
            }
            i++;
            args.add(b.toByteArray());
        }
        return args;
    }
}
