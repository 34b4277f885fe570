package io.dlock.redisson.support;

import java.util.List;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * RedissonClients for the tests' servers: {@code useScriptCache} as asked (false: {@code EVAL}
 * with the script's text; true: {@code EVALSHA}), a short lock watchdog ({@link #WATCHDOG_MS}) so
 * that a lease left by a dead JVM ends within seconds, and small pools and thread counts (two
 * cores are shared by many tests).
 */
public final class Clients {
    /** The lockWatchdogTimeout of every client made here (Redisson renews every third of it). */
    public static final long WATCHDOG_MS = 3_000;

    private Clients() {}

    /** The Redisson version under test (system property {@code redisson.version}, set by the pom). */
    public static String redissonVersion() {
        return System.getProperty("redisson.version", "unknown");
    }

    /** The settings every client here shares. */
    public static Config config(boolean useScriptCache) {
        Config config = new Config();
        config.setUseScriptCache(useScriptCache);
        config.setLockWatchdogTimeout(WATCHDOG_MS);
        config.setThreads(2);
        config.setNettyThreads(4);
        return config;
    }

    /** A client of one server. */
    public static RedissonClient single(RedisServer server, boolean useScriptCache) {
        return single(server, config(useScriptCache), 4);
    }

    /** A client of one server from {@code config}, with a pool of {@code connections}. */
    public static RedissonClient single(RedisServer server, Config config, int connections) {
        config.useSingleServer()
                .setAddress(server.address())
                .setConnectionPoolSize(connections)
                .setConnectionMinimumIdleSize(1)
                .setSubscriptionConnectionPoolSize(2)
                .setSubscriptionConnectionMinimumIdleSize(1);
        return Redisson.create(config);
    }

    /** Shuts a client down without Netty's default 2 s quiet period. */
    public static void close(RedissonClient client) {
        client.shutdown(0, 5, TimeUnit.SECONDS);
    }

    /**
     * The owner Redisson writes into a lock hash for the calling thread: {@code <client id>:<thread
     * id>} (the tests check it against HGETALL rather than trusting it).
     */
    public static String owner(RedissonClient client) {
        return client.getId() + ":" + Thread.currentThread().getId();
    }

    /** A client of a Redis Cluster, seeded with every node. */
    public static RedissonClient cluster(List<RedisServer> nodes, boolean useScriptCache) {
        Config config = config(useScriptCache);
        var cluster = config.useClusterServers()
                .setScanInterval(200)
                .setMasterConnectionPoolSize(4)
                .setMasterConnectionMinimumIdleSize(1)
                .setSlaveConnectionPoolSize(2)
                .setSlaveConnectionMinimumIdleSize(1)
                .setSubscriptionConnectionPoolSize(2)
                .setSubscriptionConnectionMinimumIdleSize(1);
        for (RedisServer n : nodes) {
            cluster.addNodeAddress(n.address());
        }
        return Redisson.create(config);
    }
}
