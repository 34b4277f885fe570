package io.dlock.redisson.support;

import java.util.ArrayList;
import java.util.List;

/**
 * A MONITOR connection read in the background: lets a test wait until a Redisson client sent a
 * given number of its own commands on a key (e.g. the second lock attempt a waiter makes after it
 * subscribed, so that it now sleeps on the TTL that attempt saw).
 */
public final class Monitor implements AutoCloseable {
    private final Resp connection;
    private final List<String> lines = new ArrayList<>();
    private final Thread reader;

    public Monitor(RedisServer server) {
        connection = server.connect();
        if (!"OK".equals(connection.call("MONITOR"))) {
            throw new IllegalStateException("MONITOR refused");
        }
        reader = new Thread(() -> {
            try {
                while (true) {
                    Object line = connection.read();
                    synchronized (lines) {
                        lines.add(String.valueOf(line));
                    }
                }
            } catch (RuntimeException closed) {
                // the connection was closed: done
            }
        }, "monitor");
        reader.setDaemon(true);
        reader.start();
    }

    /**
     * Commands a client (not a script's own calls, not the tests' PUBSUB/DLOCK.* checks) sent
     * naming {@code key} so far. A Redisson script the module serves shows as {@code
     * dlock.redisson} (MONITOR sees the command after the module's filter renamed it): counted.
     */
    public int clientCommandsOn(String key) {
        String quoted = "\"" + key + "\"";
        int n = 0;
        synchronized (lines) {
            for (String l : lines) {
                if (l.contains(quoted) && !l.contains(" lua]") && !l.contains("\"PUBSUB\"")
                        && (!l.toUpperCase().contains("\"DLOCK.") || l.toUpperCase().contains("\"DLOCK.REDISSON\""))) {
                    n++;
                }
            }
        }
        return n;
    }

    /** Every line seen so far (for a failure message). */
    public List<String> lines() {
        synchronized (lines) {
            return new ArrayList<>(lines);
        }
    }

    @Override
    public void close() {
        connection.close();
    }
}
