package io.dlock.redisson.bench;

import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.LongAdder;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * What a Redisson user sees, in one run (`make bench`): the real Redisson's uncontended
 * lock()+unlock() cycles per second (one thread, and {@value #THREADS} threads on keys of their
 * own) and a hot lock's hand-offs per second ({@value #THREADS} threads on one key), against a
 * server with the module serving Redisson's scripts ({@code redisson native}, the default where
 * the argument exists), with the module loaded but serving off ({@code redisson lua}), and
 * without the module; ratios against the last. Redisson's own defaults (useScriptCache as the
 * version ships it, the 30 s watchdog), one client per server.
 *
 * <p>System properties {@code bench.seconds} (default 2): the measuring time of each cell, after
 * a warm-up second; {@code bench.rounds} (default 3): rounds over the setups, each cell keeping
 * its best (the machine's other load hits the setups alike).
 */
public final class RedissonBench {
    static final int THREADS = 8;
    private static final long SECONDS = Long.getLong("bench.seconds", 2);
    /** Rounds over the setups; each cell is its best round. */
    private static final int ROUNDS = Integer.getInteger("bench.rounds", 3);

    private RedissonBench() {}

    /** One server set-up of the comparison. */
    private record Setup(String name, RedisServer.Builder builder) {}

    public static void main(String[] args) throws Exception {
        List<Setup> setups = List.of(
                new Setup("module, redisson native", RedisServer.withModule().moduleArgs("redisson", "native")),
                new Setup("module, redisson lua", RedisServer.withModule().moduleArgs("redisson", "lua")),
                new Setup("no module", RedisServer.plain()));
        String[] rows = {"uncontended lock+unlock/s, 1 thread", "uncontended lock+unlock/s, " + THREADS + " threads",
            "hot lock hand-offs/s, " + THREADS + " threads"};
        Map<String, double[]> results = new LinkedHashMap<>();
        Map<String, String> notes = new LinkedHashMap<>();
        String serverVersion = "";
        warmUp();
        // Every setup's server and client first; then rounds that measure each setup in turn,
        // keeping each cell's best round: the machine's other load hits the setups alike.
        Map<String, RedisServer> servers = new LinkedHashMap<>();
        Map<String, RedissonClient> clients = new LinkedHashMap<>();
        try {
            for (Setup setup : setups) {
                Setup s = setup;
                RedisServer server;
                try {
                    server = s.builder().start();
                } catch (IllegalStateException e) {
                    notes.put(s.name(), "not run: the module refused `" + s.name().substring(8) + "` (no such argument on this build)");
                    if (!s.name().endsWith("native")) {
                        continue;
                    }
                    // A build without the argument: the module as it is, against no module.
                    s = new Setup("module", RedisServer.withModule());
                    server = s.builder().start();
                }
                servers.put(s.name(), server);
                clients.put(s.name(), client(server));
                results.put(s.name(), new double[rows.length]);
            }
            for (int round = 0; round < ROUNDS; round++) {
                for (var e : clients.entrySet()) {
                    RedissonClient r = e.getValue();
                    double[] cells = {uncontended(r, 1), uncontended(r, THREADS), handOffs(r)};
                    double[] best = results.get(e.getKey());
                    for (int i = 0; i < cells.length; i++) {
                        best[i] = Math.max(best[i], cells[i]);
                    }
                }
            }
            for (var e : servers.entrySet()) {
                try (Resp c = e.getValue().connect()) {
                    serverVersion = c.info("server").getOrDefault("redis_version", "?");
                    String served = c.info("dlock").get("dlock_redisson_served");
                    if (served != null) {
                        notes.put(e.getKey(), "dlock_redisson_served " + served);
                    }
                }
            }
        } finally {
            clients.values().forEach(Clients::close);
            servers.values().forEach(RedisServer::close);
        }
        print(rows, results, notes, serverVersion);
    }

    /** Redisson's code compiled by the JIT before anything is measured (else the first setup pays for it). */
    private static void warmUp() throws InterruptedException {
        try (RedisServer server = RedisServer.plain().start()) {
            RedissonClient r = client(server);
            try {
                for (int i = 0; i < 2; i++) {
                    uncontended(r, 1);
                    handOffs(r);
                }
            } finally {
                Clients.close(r);
            }
        }
    }

    private static RedissonClient client(RedisServer server) {
        Config config = new Config();
        config.setThreads(THREADS);
        config.useSingleServer().setAddress(server.address()).setConnectionPoolSize(2 * THREADS)
                .setConnectionMinimumIdleSize(THREADS);
        return Redisson.create(config);
    }

    /** lock()+unlock() cycles per second, {@code threads} threads each on a key of its own. */
    private static double uncontended(RedissonClient r, int threads) throws InterruptedException {
        return run(threads, i -> r.getLock("bench:uncontended:" + i));
    }

    /** Hand-offs per second of one lock that {@value #THREADS} threads take in turn. */
    private static double handOffs(RedissonClient r) throws InterruptedException {
        RLock hot = r.getLock("bench:hot");
        return run(THREADS, i -> hot);
    }

    /** Runs lock()+unlock() in {@code threads} threads, a warm-up second first; cycles per second. */
    private static double run(int threads, java.util.function.IntFunction<RLock> lockOf) throws InterruptedException {
        LongAdder cycles = new LongAdder();
        AtomicBoolean counting = new AtomicBoolean(false);
        AtomicBoolean stop = new AtomicBoolean(false);
        CountDownLatch done = new CountDownLatch(threads);
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            RLock lock = lockOf.apply(i);
            Thread t = new Thread(() -> {
                try {
                    while (!stop.get()) {
                        lock.lock();
                        lock.unlock();
                        if (counting.get()) {
                            cycles.increment();
                        }
                    }
                } finally {
                    done.countDown();
                }
            });
            ts.add(t);
            t.start();
        }
        Thread.sleep(1_000);
        counting.set(true);
        long start = System.nanoTime();
        Thread.sleep(TimeUnit.SECONDS.toMillis(SECONDS));
        long n = cycles.sum();
        double secs = (System.nanoTime() - start) / 1e9;
        stop.set(true);
        done.await(30, TimeUnit.SECONDS);
        return n / secs;
    }

    private static void print(String[] rows, Map<String, double[]> results, Map<String, String> notes, String serverVersion) {
        System.out.printf("Redisson %s against Redis %s (best of %d rounds of %d s, Redisson's defaults; ratio: against no module)%n",
                Clients.redissonVersion(), serverVersion, ROUNDS, SECONDS);
        StringBuilder head = new StringBuilder(String.format("%-42s", ""));
        for (String name : results.keySet()) {
            head.append(String.format("%26s", name));
        }
        System.out.println(head);
        double[] base = results.get("no module");
        for (int i = 0; i < rows.length; i++) {
            StringBuilder line = new StringBuilder(String.format("%-42s", rows[i]));
            for (double[] r : results.values()) {
                String cell = String.format("%,.0f", r[i]);
                if (base != null && r != base) {
                    cell += String.format(" (%.2fx)", r[i] / base[i]);
                }
                line.append(String.format("%26s", cell));
            }
            System.out.println(line);
        }
        notes.forEach((k, v) -> System.out.println(k + ": " + v));
    }
}
