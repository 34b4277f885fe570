package io.dlock.redisson.scripts;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import io.dlock.redisson.support.Resp;

/**
 * A whole keyspace as the scripts leave it: every key's type and value (strings, hashes with
 * their fields) and its absolute expiry ({@code PEXPIRETIME}, so that two snapshots taken moments
 * apart, or before and after a restart, compare without drift).
 */
record Keyspace(Map<String, Entry> keys) {
    /** One key: its type, its value as text, and its PEXPIRETIME (-1: none). */
    record Entry(String type, String value, long expireAt) {}

    static Keyspace of(Resp c) {
        Map<String, Entry> keys = new TreeMap<>();
        for (Object k : (List<?>) c.ok("KEYS", "*")) {
            String key = (String) k;
            String type = (String) c.ok("TYPE", key);
            String value = switch (type) {
                case "string" -> (String) c.ok("GET", key);
                case "hash" -> new TreeMap<>(c.hgetall(key)).toString();
                case "none" -> null; // expired between KEYS and TYPE: absent
                default -> "(" + type + ")";
            };
            if (value != null) {
                keys.put(key, new Entry(type, value, (Long) c.ok("PEXPIRETIME", key)));
            }
        }
        return new Keyspace(keys);
    }

    /**
     * What differs from {@code other} (empty: the same): keys, types, values, and expiries further
     * apart than {@code toleranceMs} (the two servers ran the call moments apart).
     */
    List<String> differences(Keyspace other, long toleranceMs) {
        List<String> d = new ArrayList<>();
        for (String k : keys.keySet()) {
            if (!other.keys.containsKey(k)) {
                d.add("only in the first: " + k + " = " + keys.get(k));
            }
        }
        for (Map.Entry<String, Entry> e : other.keys.entrySet()) {
            Entry a = keys.get(e.getKey());
            Entry b = e.getValue();
            if (a == null) {
                d.add("only in the second: " + e.getKey() + " = " + b);
            } else if (!a.type().equals(b.type()) || !a.value().equals(b.value())) {
                d.add(e.getKey() + ": " + a + " vs " + b);
            } else if ((a.expireAt() < 0 || b.expireAt() < 0) ? a.expireAt() != b.expireAt()
                    : Math.abs(a.expireAt() - b.expireAt()) > toleranceMs) {
                d.add(e.getKey() + ": expires at " + a.expireAt() + " vs " + b.expireAt());
            }
        }
        return d;
    }
}
