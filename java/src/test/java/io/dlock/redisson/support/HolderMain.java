package io.dlock.redisson.support;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * A JVM that takes an RLock with the watchdog (lock(), no lease) and then waits to be killed:
 * {@code HolderMain <redis address> <key> <useScriptCache>}. Prints {@code locked <owner>} once
 * it holds the lock.
 */
public final class HolderMain {
    private HolderMain() {}

    public static void main(String[] args) throws InterruptedException {
        Config config = Clients.config(Boolean.parseBoolean(args[2]));
        config.useSingleServer().setAddress(args[0]).setConnectionMinimumIdleSize(1)
                .setSubscriptionConnectionMinimumIdleSize(1);
        RedissonClient client = Redisson.create(config);
        RLock lock = client.getLock(args[1]);
        lock.lock();
        System.out.println("locked " + Clients.owner(client));
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }

    /** Starts a holder JVM on the tests' own class path. */
    public static Process start(RedisServer server, String key, boolean useScriptCache) {
        String java = ProcessHandle.current().info().command().orElse("java");
        try {
            return new ProcessBuilder(java, "-Xmx64m", "-XX:TieredStopAtLevel=1",
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-cp", System.getProperty("java.class.path"), HolderMain.class.getName(),
                    server.address(), key, String.valueOf(useScriptCache))
                    .redirectError(ProcessBuilder.Redirect.DISCARD).start();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
