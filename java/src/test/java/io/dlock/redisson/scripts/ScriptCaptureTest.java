package io.dlock.redisson.scripts;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

import io.dlock.redisson.support.Clients;

/**
 * Captures the scripts of the Redisson under test into {@code target/redisson/scripts-<v>.json}
 * and checks that every role the module serves was seen, with the text's shape the role implies.
 * A version's texts never change, so an existing file is only checked again, unless {@code
 * -Ddlock.capture=force} ({@code make redisson-scripts} runs this class alone, forced, for each
 * version).
 */
class ScriptCaptureTest {
    @Test
    void capturesEveryLockRole() throws Exception {
        String version = Clients.redissonVersion();
        CapturedScripts captured = "force".equals(System.getProperty("dlock.capture"))
                ? ScriptCapture.capture(version) : CapturedScripts.underTest();
        boolean batched = CapturedScripts.compareVersions(version, "3.44.0") >= 0;
        List<String> roles = new ArrayList<>(List.of("lock.tryLock", "lock.unlock", "lock.forceUnlock",
                "rwlock.read.tryLock", "rwlock.write.tryLock", "rwlock.read.unlock", "rwlock.write.unlock",
                "rwlock.read.forceUnlock", "rwlock.write.forceUnlock"));
        roles.addAll(batched ? List.of("lock.renewBatch", "rwlock.renewBatch", "rwlock.write.renewBatch")
                : List.of("lock.renew", "rwlock.read.renew", "rwlock.write.renew"));
        for (String role : roles) {
            assertNotNull(captured.role(role), role + " not captured from Redisson " + version);
        }
        for (CapturedScripts.Script s : captured.scripts()) {
            assertFalse(s.name().equals("other"), "a text no operation of its own explains: " + s.text());
            assertEquals(CapturedScripts.sha1(s.text()), s.sha1());
            assertFalse(s.example().isEmpty(), s.name() + ": no call recorded");
            if (!s.text().contains("#KEYS")) {
                assertEquals(String.valueOf(s.keyCount()), s.example().get(0), s.name() + ": numkeys");
            }
        }
        // the file reads back as written
        assertEquals(captured, CapturedScripts.read(CapturedScripts.file(version)));
        assertTrue(captured.role("lock.tryLock").text().contains("hincrby"));
    }
}
