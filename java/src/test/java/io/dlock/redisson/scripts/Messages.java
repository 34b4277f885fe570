package io.dlock.redisson.scripts;

import java.util.ArrayList;
import java.util.List;

import io.dlock.redisson.support.RedisServer;
import io.dlock.redisson.support.Resp;

/**
 * Every message a server sends to a subscriber of the pattern {@code *} (PUBLISH, and with
 * {@code notify-keyspace-events KEA} every keyspace and keyevent notification) and of the given
 * sharded channels (SPUBLISH), read up to a marker published after each step: a subscriber gets
 * messages in the order the server made them, so everything the step caused comes before it.
 */
final class Messages implements AutoCloseable {
    private static final String MARKER = "dlock-diff-marker";
    private final RedisServer server;
    private final Resp sub;
    private int markers;

    Messages(RedisServer server, List<String> shardedChannels) {
        this.server = server;
        this.sub = server.connect();
        sub.timeout(10_000);
        sub.send("PSUBSCRIBE", "*");
        sub.read();
        for (String ch : shardedChannels) {
            sub.send("SSUBSCRIBE", ch);
            sub.read();
        }
    }

    /** The messages since the previous call, each as {@code kind channel payload}. */
    List<String> drain() {
        String marker = String.valueOf(markers++);
        server.call("PUBLISH", MARKER, marker);
        List<String> got = new ArrayList<>();
        while (true) {
            List<?> m = (List<?>) sub.read();
            String kind = (String) m.get(0);
            String channel = (String) m.get(kind.equals("pmessage") ? 2 : 1);
            String payload = String.valueOf(m.get(m.size() - 1));
            if (channel.equals(MARKER)) {
                if (payload.equals(marker)) {
                    return got;
                }
                continue;
            }
            got.add(kind + " " + channel + " " + payload);
        }
    }

    @Override
    public void close() {
        sub.close();
    }
}
