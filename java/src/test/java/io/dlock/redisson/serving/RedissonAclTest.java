package io.dlock.redisson.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;

/**
 * A user whose ACL lets Redisson's Lua run, but who may not run any of the module's commands,
 * gets its locks through the real Redisson with the module loaded and serving: no NOPERM that the
 * Lua would not give (the server's ACL LOG stays empty), and every lock script still recognised.
 * Two grants: the commands one by one (what a careful operator writes), and categories. Run on
 * Redis 7.0 (module commands have no categories there) and 8.2 with {@code -Ddlock.server=}.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class RedissonAclTest {
    /** Exactly what Redisson's connections and lock scripts use. */
    static final String COMMANDS = "+eval +evalsha +script|load +script|exists +exists +hexists +hincrby +pexpire +pttl"
            + " +del +hget +hset +set +get +hdel +hlen +hkeys +publish +spublish +subscribe +unsubscribe +psubscribe"
            + " +punsubscribe +ssubscribe +sunsubscribe +ping +client|setname +client|id +select +info +readonly +auth +hello";
    static final String CATEGORIES = "+@scripting +@read +@write +@pubsub +@connection +@keyspace +@hash +@string";

    private RedisServer server;
    private Resp admin;

    @BeforeAll
    void start() {
        server = RedisServer.withModule().start();
        admin = server.connect();
    }

    @AfterAll
    void stop() {
        admin.close();
        server.close();
    }

    /** Creates {@code user} with {@code grant}, then takes away every command of the module. */
    private void user(String user, String grant) {
        List<Object> acl = new ArrayList<>(List.of("ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "&*", "-@all"));
        acl.addAll(List.of(grant.split(" ")));
        for (Object c : (List<?>) admin.ok("COMMAND", "LIST", "FILTERBY", "MODULE", "dlock")) {
            acl.add("-" + c);
        }
        admin.ok(acl.toArray());
        try (Resp c = server.connect()) {
            c.ok("AUTH", user, "pw");
            Object denied = c.call("DLOCK.ACQUIRE", "acl:probe", "someone", "1000");
            assertInstanceOf(Resp.Error.class, denied);
            assertEquals("NOPERM", ((Resp.Error) denied).code(), "the user must not be allowed the module's commands");
        }
        admin.ok("ACL", "LOG", "RESET");
    }

    private RedissonClient client(String user, boolean useScriptCache) {
        Config config = Clients.config(useScriptCache);
        config.useSingleServer().setUsername(user).setPassword("pw");
        return Clients.single(server, config, 4);
    }

    @ParameterizedTest(name = "{0} grant, useScriptCache={1}")
    @CsvSource({"commands,false", "commands,true", "categories,false", "categories,true"})
    void locksWithoutTheModulesCommands(String grant, boolean useScriptCache) throws Exception {
        String user = "app_" + grant + "_" + useScriptCache;
        user(user, grant.equals("commands") ? COMMANDS : CATEGORIES);
        Counters before = Counters.of(admin);
        assertTrue(before.present(), "INFO dlock has no dlock_redisson_served: this module does not serve Redisson's scripts");
        RedissonClient a = client(user, useScriptCache);
        RedissonClient b = client(user, useScriptCache);
        try {
            String name = "acl:" + user;
            RLock lock = a.getLock(name);
            long locked = System.nanoTime();
            lock.lock();
            assertTrue(lock.isHeldByCurrentThread());
            CompletableFuture<Boolean> waiter = CompletableFuture.supplyAsync(() -> {
                try {
                    RLock w = b.getLock(name);
                    boolean got = w.tryLock(10, 5, TimeUnit.SECONDS);
                    if (got) {
                        w.unlock();
                    }
                    return got;
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            Watchdog.awaitRenewal(admin, name, locked);
            lock.unlock();
            assertTrue(waiter.get(10, TimeUnit.SECONDS), "the waiter was not given the lock");
            lock.lock(5, TimeUnit.SECONDS);
            lock.forceUnlock();
            RReadWriteLock rw = a.getReadWriteLock(name + ":rw");
            rw.readLock().lock(5, TimeUnit.SECONDS);
            rw.readLock().unlock();
            rw.writeLock().lock(5, TimeUnit.SECONDS);
            rw.writeLock().unlock();
            assertEquals(0L, admin.ok("EXISTS", name, name + ":rw"));
        } finally {
            Clients.close(a);
            Clients.close(b);
        }
        assertEquals(List.of(), admin.ok("ACL", "LOG"), "something was denied to " + user);
        Counters after = Counters.of(admin);
        // RLock's scripts alone: tryLock (lock, the waiter's, lock again), unlock (twice), the
        // renewal, forceUnlock; RReadWriteLock's add four where the module recognises them
        if (RedisServer.servesNatively()) {
            assertTrue(after.recognisedSince(before) >= 7, "Redisson's scripts were not recognised: " + before + " -> " + after);
        } else {
            after.assertServedSince(before, 0);
        }
    }
}
