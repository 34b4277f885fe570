package io.dlock.redisson.support;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

/**
 * One throw-away {@code redis-server} on a free loopback port, in a temporary directory, nothing
 * persisted ({@code --save "" --appendonly no}), with the dlock module loaded or not. {@link
 * #close()} kills it by PID; a JVM shutdown hook kills whatever a failed test left running.
 *
 * <p>System properties: {@code dlock.server} the server binary (default {@code redis-server} on
 * PATH), {@code dlock.module} the module (default {@code ../target/release/libdlock.so}).
 * Environment: {@code DLOCK_REDISSON=lua} (or {@code native}) loads the module with {@code
 * redisson lua} (or {@code native}) wherever a test does not name the mode itself, so that the
 * whole suite runs both ways (see {@link #servesNatively()}).
 */
public final class RedisServer implements AutoCloseable {
    public static final String HOST = "127.0.0.1";
    private static final Set<Process> RUNNING = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> RUNNING.forEach(Process::destroyForcibly)));
    }

    private final Process process;
    private final int port;
    private final Path dir;

    private RedisServer(Process process, int port, Path dir) {
        this.process = process;
        this.port = port;
        this.dir = dir;
    }

    /** A server with the dlock module loaded (module arguments may follow, see {@link Builder#moduleArgs}). */
    public static Builder withModule() {
        return new Builder(true);
    }

    /** A server without the module: Redisson's Lua as it runs everywhere else. */
    public static Builder plain() {
        return new Builder(false);
    }

    /** The module's {@code redisson} argument for this run ({@code DLOCK_REDISSON}), or null: the module's default. */
    public static String redissonMode() {
        String mode = System.getenv("DLOCK_REDISSON");
        if (mode == null || mode.isBlank()) {
            return null;
        }
        if (!mode.equals("lua") && !mode.equals("native")) {
            throw new IllegalStateException("DLOCK_REDISSON must be lua or native, not " + mode);
        }
        return mode;
    }

    /**
     * Whether a server started by {@link #withModule()} without a {@code redisson} argument of the
     * test's own serves Redisson's lock scripts natively (the module's default); false under {@code
     * DLOCK_REDISSON=lua}, where the module registers no filter: the scripts run as Lua and neither
     * counter of INFO dlock moves.
     */
    public static boolean servesNatively() {
        return !"lua".equals(redissonMode());
    }

    /** The server binary the tests run. */
    public static String binary() {
        return System.getProperty("dlock.server", "redis-server");
    }

    /** The module the tests load. */
    public static Path modulePath() {
        return Path.of(System.getProperty("dlock.module", "../target/release/libdlock.so")).toAbsolutePath().normalize();
    }

    /** A port that was free a moment ago on 127.0.0.1 (never 6379). */
    public static int freePort() {
        while (true) {
            try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName(HOST))) {
                if (s.getLocalPort() != 6379) {
                    return s.getLocalPort();
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /** How to start a server. */
    public static final class Builder {
        private final boolean module;
        private final List<String> moduleArgs = new ArrayList<>();
        private final List<String> args = new ArrayList<>();

        private Builder(boolean module) {
            this.module = module;
        }

        /** Arguments after the module's path on the {@code --loadmodule} line, e.g. {@code "redisson", "lua"}. */
        public Builder moduleArgs(String... a) {
            moduleArgs.addAll(List.of(a));
            return this;
        }

        /** Extra server options, e.g. {@code "--cluster-enabled", "yes"}. */
        public Builder args(String... a) {
            args.addAll(List.of(a));
            return this;
        }

        /** Starts the server; a port taken meanwhile by another process is replaced by another. */
        public RedisServer start() {
            IllegalStateException last = null;
            for (int attempt = 0; attempt < 5; attempt++) {
                try {
                    return startOn(freePort());
                } catch (PortTaken e) {
                    last = e;
                }
            }
            throw last;
        }

        private RedisServer startOn(int port) {
            Path dir;
            try {
                dir = Files.createTempDirectory("dlock-java-");
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            List<String> cmd = new ArrayList<>(List.of(binary(), "--port", String.valueOf(port), "--bind", HOST,
                    "--save", "", "--appendonly", "no", "--dir", dir.toString(), "--daemonize", "no"));
            if (module) {
                Path m = modulePath();
                if (!Files.exists(m)) {
                    throw new IllegalStateException("the module " + m + " is not built (make build)");
                }
                cmd.add("--loadmodule");
                cmd.add(m.toString());
                cmd.addAll(moduleArgs);
                if (redissonMode() != null && moduleArgs.stream().noneMatch("redisson"::equalsIgnoreCase)) {
                    cmd.add("redisson");
                    cmd.add(redissonMode());
                }
            }
            cmd.addAll(args);
            File log = dir.resolve("server.log").toFile();
            Process p;
            try {
                p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log).start();
            } catch (IOException e) {
                throw new UncheckedIOException("start " + cmd, e);
            }
            RUNNING.add(p);
            RedisServer server = new RedisServer(p, port, dir);
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (System.nanoTime() < deadline) {
                if (!p.isAlive()) {
                    String text = server.log();
                    server.close();
                    if (text.contains("Address already in use")) {
                        throw new PortTaken(port);
                    }
                    throw new IllegalStateException("redis-server exited (" + String.join(" ", cmd) + "):\n" + text);
                }
                try (Resp c = new Resp(HOST, port)) {
                    if ("PONG".equals(c.call("PING"))) {
                        return server;
                    }
                } catch (UncheckedIOException notYet) {
                    // not listening yet
                }
                pause(20);
            }
            String text = server.log();
            server.close();
            throw new IllegalStateException("redis-server did not answer PING in 20 s:\n" + text);
        }
    }

    private static final class PortTaken extends IllegalStateException {
        PortTaken(int port) {
            super("port " + port + " was taken");
        }
    }

    public int port() {
        return port;
    }

    public long pid() {
        return process.pid();
    }

    /** {@code redis://127.0.0.1:port}, as Redisson's config takes it. */
    public String address() {
        return "redis://" + HOST + ":" + port;
    }

    /** A new plain connection (close it). */
    public Resp connect() {
        return new Resp(HOST, port);
    }

    /** One command on a connection of its own; an error reply is thrown. */
    public Object call(Object... args) {
        try (Resp c = connect()) {
            return c.ok(args);
        }
    }

    public boolean isAlive() {
        return process.isAlive();
    }

    /** What the server printed so far. */
    public String log() {
        try {
            return Files.readString(dir.resolve("server.log"), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(no log: " + e.getMessage() + ")";
        }
    }

    /** Kills the server by PID (SIGKILL) and removes its directory. */
    @Override
    public void close() {
        process.destroyForcibly();
        try {
            process.waitFor();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        RUNNING.remove(process);
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        } catch (IOException ignored) {
            // a temp dir left behind is harmless
        }
    }

    static void pause(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
