package io.dlock.redisson.scripts;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import io.dlock.redisson.support.Clients;

/**
 * Redisson's lock scripts as one Redisson version sends them, captured from the real client by
 * {@link ScriptCapture} into {@code target/redisson/scripts-<version>.json} (at the repository's
 * root; never committed: the project keeps at most the SHA1s):
 * {@code {"redisson": v, "scripts": [{"name": role, "sha1": hex, "also": [roles], "example": [...], "text": t}]}}.
 * {@code also} names the other roles that send the same text; {@code example} is the
 * {@code numkeys keys... args...} of one call Redisson made with it.
 */
public record CapturedScripts(String redisson, List<Script> scripts) {
    /** One distinct script text and the role (operation) that sends it. */
    public record Script(String name, String sha1, String text, List<String> also, List<String> example) {
        /** The roles that send this text. */
        public List<String> roles() {
            List<String> r = new ArrayList<>(List.of(name));
            r.addAll(also);
            return r;
        }

        /** The highest n of {@code KEYS[n]} in the text: how many keys the script takes. */
        public int keyCount() {
            return maxIndex("KEYS[");
        }

        /** The highest n of {@code ARGV[n]} in the text. */
        public int argCount() {
            return maxIndex("ARGV[");
        }

        private int maxIndex(String prefix) {
            int max = 0;
            for (int at = text.indexOf(prefix); at >= 0; at = text.indexOf(prefix, at + 1)) {
                int end = text.indexOf(']', at);
                String inner = text.substring(at + prefix.length(), end);
                if (inner.chars().allMatch(Character::isDigit)) {
                    max = Math.max(max, Integer.parseInt(inner));
                }
            }
            return max;
        }
    }

    /** {@code target/redisson} at the repository's root (the Maven project runs in {@code java/}). */
    public static Path dir() {
        return Path.of(System.getProperty("dlock.scripts.dir", "../target/redisson")).toAbsolutePath().normalize();
    }

    public static Path file(String version) {
        return dir().resolve("scripts-" + version + ".json");
    }

    /**
     * Whether the module must serve scripts of this role natively: RLock's and
     * RReadWriteLock's (docs/BEHAVIOUR.md, "Redisson's scripts, served natively"). Every role
     * must behave exactly as the Lua all the same (the differential test compares them all).
     */
    public static boolean servedNatively(String role) {
        return role.startsWith("lock.") || role.startsWith("rwlock.");
    }

    /** The script with this SHA1 (lower-case hex), or null. */
    public Script bySha(String sha1) {
        return scripts.stream().filter(s -> s.sha1().equals(sha1)).findFirst().orElse(null);
    }

    /** The scripts of the Redisson under test, captured first if its file is missing. */
    public static CapturedScripts underTest() throws Exception {
        String version = Clients.redissonVersion();
        if (!Files.exists(file(version))) {
            return ScriptCapture.capture(version);
        }
        return read(file(version));
    }

    /** Every captured file present, oldest version first. */
    public static List<CapturedScripts> all() {
        if (!Files.isDirectory(dir())) {
            return List.of();
        }
        try (Stream<Path> files = Files.list(dir())) {
            return files.filter(p -> p.getFileName().toString().matches("scripts-.*\\.json"))
                    .map(CapturedScripts::read)
                    .sorted((a, b) -> compareVersions(a.redisson(), b.redisson()))
                    .toList();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The script with this role (its name or one of its {@code also}), or null. */
    public Script role(String role) {
        return scripts.stream().filter(s -> s.roles().contains(role)).findFirst().orElse(null);
    }

    public static CapturedScripts read(Path file) {
        try {
            @SuppressWarnings("unchecked")
            Map<String, Object> doc = (Map<String, Object>) Json.parse(Files.readString(file, StandardCharsets.UTF_8));
            List<Script> scripts = new ArrayList<>();
            for (Object o : (List<?>) doc.get("scripts")) {
                Map<?, ?> m = (Map<?, ?>) o;
                scripts.add(new Script((String) m.get("name"), (String) m.get("sha1"), (String) m.get("text"),
                        strings(m.get("also")), strings(m.get("example"))));
            }
            return new CapturedScripts((String) doc.get("redisson"), scripts);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public void write() {
        StringBuilder b = new StringBuilder();
        b.append("{\"redisson\": ").append(Json.quote(redisson)).append(", \"scripts\": [\n");
        for (int i = 0; i < scripts.size(); i++) {
            Script s = scripts.get(i);
            b.append("  {\"name\": ").append(Json.quote(s.name())).append(", \"sha1\": ").append(Json.quote(s.sha1()));
            b.append(", \"also\": ").append(list(s.also())).append(", \"example\": ").append(list(s.example()));
            b.append(", \"text\": ").append(Json.quote(s.text())).append('}').append(i + 1 < scripts.size() ? ",\n" : "\n");
        }
        b.append("]}\n");
        try {
            Files.createDirectories(dir());
            Files.writeString(file(redisson), b.toString(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The lower-case hex SHA1 of a script text, as EVALSHA takes it. */
    public static String sha1(String text) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-1").digest(text.getBytes(StandardCharsets.UTF_8)));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Orders "3.23.5" before "3.45.1" before "4.7.0". */
    public static int compareVersions(String a, String b) {
        String[] x = a.split("\\.");
        String[] y = b.split("\\.");
        for (int i = 0; i < Math.max(x.length, y.length); i++) {
            int p = i < x.length ? Integer.parseInt(x[i].replaceAll("\\D.*", "")) : 0;
            int q = i < y.length ? Integer.parseInt(y[i].replaceAll("\\D.*", "")) : 0;
            if (p != q) {
                return Integer.compare(p, q);
            }
        }
        return 0;
    }

    private static List<String> strings(Object o) {
        List<String> l = new ArrayList<>();
        if (o != null) {
            for (Object x : (List<?>) o) {
                l.add((String) x);
            }
        }
        return l;
    }

    private static String list(List<String> l) {
        return "[" + String.join(", ", l.stream().map(Json::quote).toList()) + "]";
    }
}
