package io.dlock.redisson.support;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A Redis Cluster of throw-away primaries with the module (no replicas): slots split evenly,
 * {@code cluster_state:ok} awaited on every node, and a live slot migration done by hand as
 * {@code redis-cli --cluster reshard} does it ({@code SETSLOT IMPORTING/MIGRATING}, {@code
 * MIGRATE}, {@code SETSLOT NODE}).
 */
public final class RedisCluster implements AutoCloseable {
    private static final int SLOTS = 16384;
    public final List<RedisServer> nodes = new ArrayList<>();

    public RedisCluster(int primaries) {
        try {
            for (int i = 0; i < primaries; i++) {
                nodes.add(RedisServer.withModule()
                        .args("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                "--cluster-node-timeout", "5000",
                                "--cluster-port", String.valueOf(RedisServer.freePort()),
                                "--cluster-announce-ip", RedisServer.HOST)
                        .start());
            }
            int per = SLOTS / primaries;
            for (int i = 0; i < primaries; i++) {
                RedisServer n = nodes.get(i);
                // Distinct config epochs before the nodes meet, as redis-cli --cluster create.
                n.call("CLUSTER", "SET-CONFIG-EPOCH", i + 1);
                n.call("CLUSTER", "ADDSLOTSRANGE", i * per, i + 1 == primaries ? SLOTS - 1 : i * per + per - 1);
            }
            for (RedisServer n : nodes.subList(1, primaries)) {
                List<?> bus = (List<?>) n.call("CONFIG", "GET", "cluster-port");
                nodes.get(0).call("CLUSTER", "MEET", RedisServer.HOST, n.port(), bus.get(1));
            }
            for (RedisServer n : nodes) {
                Await.until(Duration.ofSeconds(30), "every node known and cluster_state:ok", () ->
                        ((String) n.call("CLUSTER", "NODES")).lines().count() == primaries
                                && ((String) n.call("CLUSTER", "INFO")).contains("cluster_state:ok"));
            }
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    /** {@code CLUSTER KEYSLOT key}. */
    public int slot(String key) {
        return ((Long) nodes.get(0).call("CLUSTER", "KEYSLOT", key)).intValue();
    }

    /** The node (index) serving {@code slot}, as every node agrees. */
    public int owner(int slot) {
        for (int i = 0; i < nodes.size(); i++) {
            for (Object range : (List<?>) nodes.get(i).call("CLUSTER", "SLOTS")) {
                List<?> r = (List<?>) range;
                if ((Long) r.get(0) <= slot && slot <= (Long) r.get(1)) {
                    long port = (Long) ((List<?>) r.get(2)).get(1);
                    for (int j = 0; j < nodes.size(); j++) {
                        if (nodes.get(j).port() == port) {
                            return j;
                        }
                    }
                }
            }
        }
        throw new IllegalStateException("slot " + slot + " unassigned");
    }

    /** A key ({@code prefix:i}) whose slot node {@code node} serves. */
    public String keyOn(int node, String prefix) {
        for (int i = 0; ; i++) {
            String key = prefix + ":" + i;
            if (owner(slot(key)) == node) {
                return key;
            }
        }
    }

    public String id(int node) {
        return (String) nodes.get(node).call("CLUSTER", "MYID");
    }

    /** First step of a live migration: {@code to} imports the slot, {@code from} migrates it. */
    public void beginMigration(int slot, int from, int to) {
        nodes.get(to).call("CLUSTER", "SETSLOT", slot, "IMPORTING", id(from));
        nodes.get(from).call("CLUSTER", "SETSLOT", slot, "MIGRATING", id(to));
    }

    /** Moves the slot's keys {@code from} still has ({@code MIGRATE}, TTLs kept). */
    public void migrateKeys(int slot, int from, int to) {
        RedisServer source = nodes.get(from);
        while (true) {
            List<?> keys = (List<?>) source.call("CLUSTER", "GETKEYSINSLOT", slot, 100);
            if (keys.isEmpty()) {
                return;
            }
            List<Object> cmd = new ArrayList<>(List.of("MIGRATE", RedisServer.HOST, nodes.get(to).port(), "", 0, 5000, "KEYS"));
            cmd.addAll(keys);
            source.call(cmd.toArray());
        }
    }

    /**
     * Gives the slot to {@code to} on every node, the new owner first (with the highest config
     * epoch, so that no older claim of the old owner wins), and waits until every node says so.
     */
    public void setOwner(int slot, int to) {
        nodes.get(to).call("CLUSTER", "BUMPEPOCH");
        String id = id(to);
        nodes.get(to).call("CLUSTER", "SETSLOT", slot, "NODE", id);
        for (int i = 0; i < nodes.size(); i++) {
            if (i != to) {
                nodes.get(i).call("CLUSTER", "SETSLOT", slot, "NODE", id);
            }
        }
        Await.until(Duration.ofSeconds(30), "slot " + slot + " served by node " + to, () -> owner(slot) == to);
    }

    @Override
    public void close() {
        nodes.forEach(RedisServer::close);
    }
}
