package io.dlock.redisson.serving;

import java.util.Map;

import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The module's Redisson counters of INFO dlock at one moment. */
record Counters(long served, long lua) {
    static Counters of(Resp c) {
        Map<String, String> info = c.info("dlock");
        return new Counters(Long.parseLong(info.getOrDefault("dlock_redisson_served", "-1")),
                Long.parseLong(info.getOrDefault("dlock_redisson_lua", "-1")));
    }

    /** Whether the module has the counters at all (a module that cannot serve Redisson's scripts has not). */
    boolean present() {
        return served >= 0;
    }

    /** Calls counted since {@code before}: served natively, or recognised and run as the Lua. */
    long recognisedSince(Counters before) {
        return served - before.served + lua - before.lua;
    }

    /**
     * Asserts what the calls since {@code before} did as this run loads the module ({@link
     * RedisServer#servesNatively()}): at least {@code served} of them served natively; or, under
     * {@code redisson lua} (no filter, every script runs as Lua), none counted at all.
     */
    void assertServedSince(Counters before, long served) {
        assertTrue(present(), "INFO dlock has no dlock_redisson_served: this module does not serve Redisson's scripts");
        if (RedisServer.servesNatively()) {
            assertTrue(this.served - before.served >= served, "not served natively: " + before + " -> " + this);
        } else {
            assertEquals(before, this, "redisson lua: the scripts ran as Lua, uncounted");
        }
    }

    @Override
    public String toString() {
        return "dlock_redisson_served=" + served + " dlock_redisson_lua=" + lua;
    }
}
