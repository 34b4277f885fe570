package io.dlock.redisson.serving;

import java.util.Map;

import io.dlock.redisson.support.Resp;

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

    @Override
    public String toString() {
        return "dlock_redisson_served=" + served + " dlock_redisson_lua=" + lua;
    }
}
