package io.dlock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.redisson.support.Clients;
import io.dlock.redisson.support.RedisServer;
import org.junit.jupiter.api.Test;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/** The support classes themselves: a server with the module answers DLOCK.*, one without does not. */
class SupportTest {
    @Test
    void serversStartWithAndWithoutTheModuleAndStopByPid() {
        RedisServer with = RedisServer.withModule().start();
        long pid = with.pid();
        try (with; RedisServer plain = RedisServer.plain().start()) {
            assertTrue(with.connect().info("dlock").size() > 0, "INFO dlock on the module's server");
            assertTrue(plain.connect().info("dlock").isEmpty(), "no dlock section without the module");
            RedissonClient r = Clients.single(with, false);
            try {
                RLock lock = r.getLock("support");
                lock.lock();
                assertEquals(1L, with.call("EXISTS", "support"));
                lock.unlock();
                assertEquals(0L, with.call("EXISTS", "support"));
            } finally {
                r.shutdown();
            }
        }
        assertFalse(ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false), "killed by PID");
    }
}
