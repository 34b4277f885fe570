package io.dlock.redisson.support;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A plain RESP2 connection for the tests' own commands (DLOCK.*, INFO, CLUSTER, HGETALL...), kept
 * apart from Redisson so that what a test checks is never seen through the client under test.
 * Replies: a String (simple or bulk), a Long, a List, null, or a {@link Error} (an error reply is
 * returned, not thrown, so that tests can assert it).
 */
public final class Resp implements AutoCloseable {
    /** An error reply, e.g. {@code WRONGTYPE ...}. */
    public record Error(String message) {
        public String code() {
            int space = message.indexOf(' ');
            return space < 0 ? message : message.substring(0, space);
        }
    }

    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;

    public Resp(String host, int port) {
        try {
            socket = new Socket();
            socket.connect(new InetSocketAddress(host, port), 5000);
            socket.setTcpNoDelay(true);
            in = new BufferedInputStream(socket.getInputStream());
            out = new BufferedOutputStream(socket.getOutputStream());
        } catch (IOException e) {
            throw new UncheckedIOException("connect to " + host + ":" + port, e);
        }
    }

    /** Sends one command and reads its reply. Arguments are sent as their {@code toString()}. */
    public Object call(Object... args) {
        send(args);
        return read();
    }

    /** Like {@link #call}, but an error reply is thrown as an {@link IllegalStateException}. */
    public Object ok(Object... args) {
        Object reply = call(args);
        if (reply instanceof Error e) {
            throw new IllegalStateException(String.join(" ", strings(args)) + ": " + e.message());
        }
        return reply;
    }

    /** Sends one command without reading its reply (a blocking command read later with {@link #read}). */
    public void send(Object... args) {
        try {
            out.write(("*" + args.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
            for (Object a : args) {
                byte[] b = a instanceof byte[] raw ? raw : a.toString().getBytes(StandardCharsets.UTF_8);
                out.write(("$" + b.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
                out.write(b);
                out.write('\r');
                out.write('\n');
            }
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Reads one reply. */
    public Object read() {
        try {
            return parse();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Sets the read timeout of {@link #read} (0: none). */
    public Resp timeout(int millis) {
        try {
            socket.setSoTimeout(millis);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return this;
    }

    /** {@code INFO section} as a map of its {@code field:value} lines. */
    public Map<String, String> info(String section) {
        Map<String, String> fields = new LinkedHashMap<>();
        for (String line : ((String) ok("INFO", section)).split("\r\n")) {
            int colon = line.indexOf(':');
            if (colon > 0 && !line.startsWith("#")) {
                fields.put(line.substring(0, colon), line.substring(colon + 1));
            }
        }
        return fields;
    }

    /** {@code HGETALL key} as a map. */
    public Map<String, String> hgetall(String key) {
        List<?> flat = (List<?>) ok("HGETALL", key);
        Map<String, String> map = new LinkedHashMap<>();
        for (int i = 0; i + 1 < flat.size(); i += 2) {
            map.put((String) flat.get(i), (String) flat.get(i + 1));
        }
        return map;
    }

    private Object parse() throws IOException {
        int type = in.read();
        if (type < 0) {
            throw new IOException("connection closed");
        }
        String line = line();
        switch (type) {
            case '+':
                return line;
            case '-':
                return new Error(line);
            case ':':
                return Long.parseLong(line);
            case '$': {
                int n = Integer.parseInt(line);
                if (n < 0) {
                    return null;
                }
                byte[] b = in.readNBytes(n + 2);
                return new String(b, 0, n, StandardCharsets.UTF_8);
            }
            case '*': {
                int n = Integer.parseInt(line);
                if (n < 0) {
                    return null;
                }
                List<Object> items = new ArrayList<>(n);
                for (int i = 0; i < n; i++) {
                    items.add(parse());
                }
                return items;
            }
            default:
                throw new IOException("unexpected RESP type '" + (char) type + "' " + line);
        }
    }

    private String line() throws IOException {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        int c;
        while ((c = in.read()) != '\r') {
            if (c < 0) {
                throw new IOException("connection closed");
            }
            b.write(c);
        }
        in.read(); // '\n'
        return b.toString(StandardCharsets.UTF_8);
    }

    private static List<String> strings(Object[] args) {
        List<String> s = new ArrayList<>();
        for (Object a : args) {
            s.add(String.valueOf(a));
        }
        return s;
    }

    @Override
    public void close() {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closing a test connection: nothing to do
        }
    }
}
