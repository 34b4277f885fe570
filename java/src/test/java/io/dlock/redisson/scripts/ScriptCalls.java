package io.dlock.redisson.scripts;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;

/**
 * Random calls of Redisson's lock scripts with the KEYS/ARGV shapes Redisson gives them (see each
 * file's {@code example}), over small domains so that calls collide: three lock names, owners
 * {@code u1:1 u1:2 u2:1} and their {@code :write} forms, three leases, two latch request ids,
 * PUBLISH or SPUBLISH. Leases are long (>= 10 s): nothing expires during a sequence, so both
 * servers see the same state whatever the machine's speed.
 */
final class ScriptCalls {
    static final List<String> NAMES = List.of("dl:a", "dl:b", "{dl}:c");
    private static final List<String> OWNERS = List.of("u1:1", "u1:2", "u2:1");
    private static final List<String> LEASES = List.of("10000", "30000", "60000");
    private static final List<String> LATCH_PX = List.of("10000", "30000");

    /** One call: the script, how it is sent, and its {@code numkeys keys... args...}. */
    record Call(CapturedScripts.Script script, boolean evalsha, boolean upperSha, List<String> keys, List<String> args) {
        /** The command as sent: EVAL text or EVALSHA sha, numkeys, keys, args. */
        Object[] command() {
            List<Object> c = new ArrayList<>();
            c.add(evalsha ? "EVALSHA" : "EVAL");
            c.add(evalsha ? (upperSha ? script.sha1().toUpperCase(Locale.ROOT) : script.sha1()) : script.text());
            c.add(keys.size());
            c.addAll(keys);
            c.addAll(args);
            return c.toArray();
        }

        @Override
        public String toString() {
            return (evalsha ? "EVALSHA " : "EVAL ") + script.name() + " (" + script.sha1().substring(0, 8) + ") keys=" + keys + " args=" + args;
        }
    }

    private final Random random;

    ScriptCalls(Random random) {
        this.random = random;
    }

    /** Redisson's channel for a lock name: {@code prefix:{name}}, or {@code prefix:name} when the name has a hash tag. */
    static String channel(String prefix, String name) {
        return name.contains("{") ? prefix + ":" + name : prefix + ":{" + name + "}";
    }

    /** Every channel a script may publish on for the names of the domain (SSUBSCRIBE takes no pattern). */
    static List<String> channels() {
        List<String> c = new ArrayList<>();
        for (String n : NAMES) {
            c.add(channel("redisson_lock__channel", n));
            c.add(channel("redisson_rwlock", n));
        }
        return c;
    }

    private static String braced(String name) {
        return name.contains("{") ? name : "{" + name + "}";
    }

    private String pick(List<String> l) {
        return l.get(random.nextInt(l.size()));
    }

    private String anyOwner() {
        String o = pick(OWNERS);
        return random.nextInt(4) == 0 ? o + ":write" : o;
    }

    private String latch(String name) {
        return "redisson_unlock_latch:" + braced(name) + ":r" + (1 + random.nextInt(2));
    }

    private String timeoutPrefix(String name, String owner) {
        return braced(name) + ":" + owner + ":rwlock_timeout";
    }

    /** A random call of {@code s}, with its arguments as its role takes them. */
    Call next(CapturedScripts.Script s) {
        String name = pick(NAMES);
        String lease = pick(LEASES);
        String pub = random.nextBoolean() ? "PUBLISH" : "SPUBLISH";
        int kc = s.keyCount();
        int ac = s.argCount();
        List<String> keys = new ArrayList<>();
        List<String> args = new ArrayList<>();
        String role = s.name();
        switch (role) {
            case "lock.tryLock", "lock.renew" -> {
                keys.add(name);
                args.addAll(List.of(lease, anyOwner()));
            }
            case "lock.unlock" -> {
                keys.addAll(List.of(name, channel("redisson_lock__channel", name)));
                if (kc >= 3) {
                    keys.add(latch(name));
                }
                args.addAll(List.of("0", lease, anyOwner()));
                optional(args, ac, 4, pub, 5);
            }
            case "lock.forceUnlock", "rwlock.read.forceUnlock", "rwlock.write.forceUnlock" -> {
                boolean rw = role.startsWith("rwlock");
                keys.addAll(List.of(name, channel(rw ? "redisson_rwlock" : "redisson_lock__channel", name)));
                args.add(role.equals("rwlock.write.forceUnlock") ? "1" : "0");
                if (ac >= 2) {
                    args.add(pub);
                }
            }
            case "rwlock.read.tryLock" -> {
                String owner = pick(OWNERS);
                keys.addAll(List.of(name, timeoutPrefix(name, owner)));
                args.addAll(List.of(lease, owner, owner + ":write"));
            }
            case "rwlock.write.tryLock" -> {
                keys.add(name);
                args.addAll(List.of(lease, pick(OWNERS) + ":write"));
            }
            case "rwlock.read.unlock" -> {
                String owner = pick(OWNERS);
                keys.addAll(List.of(name, channel("redisson_rwlock", name), timeoutPrefix(name, owner), braced(name)));
                if (kc >= 5) {
                    keys.add(latch(name));
                }
                args.addAll(List.of("0", owner));
                optional(args, ac, 3, pub, 4);
            }
            case "rwlock.write.unlock" -> {
                keys.addAll(List.of(name, channel("redisson_rwlock", name)));
                if (kc >= 3) {
                    keys.add(latch(name));
                }
                args.addAll(List.of("1", lease, pick(OWNERS) + ":write"));
                optional(args, ac, 4, pub, 5);
            }
            case "rwlock.read.renew" -> {
                keys.addAll(List.of(name, braced(name)));
                args.addAll(List.of(lease, pick(OWNERS)));
            }
            case "lock.renewBatch" -> {
                args.add(lease);
                for (int i = 0, n = 1 + random.nextInt(3); i < n; i++) {
                    keys.add(pick(NAMES));
                    args.add(anyOwner());
                }
            }
            case "rwlock.renewBatch" -> {
                args.add(lease);
                boolean counted = s.text().contains("lockNamesCount");
                for (int i = 0, n = 1 + random.nextInt(3); i < n; i++) {
                    String k = pick(NAMES);
                    keys.addAll(List.of(k, braced(k)));
                    if (counted) {
                        int c = 1 + random.nextInt(2);
                        args.add(String.valueOf(c));
                        for (int j = 0; j < c; j++) {
                            args.add(pick(OWNERS));
                        }
                    } else {
                        args.add(pick(OWNERS));
                    }
                }
            }
            default -> throw new IllegalArgumentException("no argument shape for the role " + role);
        }
        return new Call(s, random.nextBoolean(), random.nextInt(8) == 0, keys, args);
    }

    /** ARGV[pubAt] is the publish command and ARGV[pxAt] the latch's lifetime, in the forms that have them. */
    private void optional(List<String> args, int ac, int pubAt, String pub, int pxAt) {
        if (ac >= pubAt) {
            args.add(pub);
        }
        if (ac >= pxAt) {
            args.add(pick(LATCH_PX));
        }
    }

    /** A plain command that changes a lock's key under the scripts (a collision, a wrong type, an operator's DEL). */
    Object[] disturbance() {
        String name = pick(NAMES);
        return switch (random.nextInt(4)) {
            case 0 -> new Object[] {"SET", name, "x", "PX", "60000"};
            case 1 -> new Object[] {"DEL", name};
            case 2 -> new Object[] {"HSET", name, "mode", random.nextBoolean() ? "read" : "write"};
            default -> new Object[] {"SET", latch(name), "1", "PX", "60000"};
        };
    }
}
