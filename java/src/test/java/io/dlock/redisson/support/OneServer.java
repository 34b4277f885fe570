package io.dlock.redisson.support;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.redisson.api.RedissonClient;

/**
 * A test class sharing one server with the module and one Redisson client per {@code
 * useScriptCache} setting; every test takes fresh keys ({@link #key}).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
public abstract class OneServer {
    private static final AtomicInteger KEYS = new AtomicInteger();
    protected RedisServer server;
    private final Map<Boolean, RedissonClient> clients = new HashMap<>();

    @BeforeAll
    void startServer() {
        server = RedisServer.withModule().start();
    }

    @AfterAll
    void stopServer() {
        try {
            clients.values().forEach(Clients::close);
        } finally {
            server.close();
        }
    }

    /** The class's client with this {@code useScriptCache}, made on first use. */
    protected RedissonClient redisson(boolean useScriptCache) {
        return clients.computeIfAbsent(useScriptCache, c -> Clients.single(server, c));
    }

    /** A key no other test uses. */
    protected static String key(String what) {
        return what + ":" + KEYS.incrementAndGet();
    }
}
