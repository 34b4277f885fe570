// Issue 41's rules, on real servers: every call is bounded when the server hangs (SIGSTOP of
// a server this file started), closed is closed (ClosedError, nothing left open, the process
// ends by itself), and one answer per mistake (NotHeldError, ConfigError).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import {
  Client,
  ClosedError,
  ConfigError,
  NotHeldError,
  ResponseTimeoutError,
  ServerConnectionError,
} from 'dlock-client';
import { Server, until } from './servers.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
// Bounds: the rule's bound plus slack for a loaded 2-core machine (the time a stopped
// process's peer needs to be scheduled, not the client's).
const RT = 500;
const SLACK = 1000;

let n = 0;
const key = (what) => `${what}:${++n}`;

/** How long `p` takes to settle, and how: [ms, value or error]. */
async function timed(p) {
  const t0 = performance.now();
  const r = await p.then(
    (v) => ({ ok: true, v }),
    (e) => ({ ok: false, e }),
  );
  return { ms: performance.now() - t0, ...r };
}

/** Connections in the server's CLIENT LIST, the asking one left out. */
async function clientCount(raw) {
  return (
    String(await raw.sendCommand(['CLIENT', 'LIST']))
      .trim()
      .split('\n').length - 1
  );
}

/** Run close-exits.mjs: its exit code and output, or a failure when it does not end by itself. */
function runChild(args, ms = 10_000) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [join(HERE, 'close-exits.mjs'), ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`the process did not exit by itself within ${ms} ms: ${out}${err}`));
    }, ms);
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

describe('a server that hangs (SIGSTOP): every call is bounded', () => {
  let server;
  let c;
  let other;
  const stop = () => server.proc.kill('SIGSTOP');
  const cont = () => server.proc.kill('SIGCONT');
  before(async () => {
    server = await Server.start();
  });
  after(async () => {
    cont();
    await Promise.all([c?.close(), other?.close()]);
    await server?.stop();
  });

  it('release, renew, acquire({timeout: 0}), waiters answer within one response time-out; lost fires on time', async () => {
    c = await Client.connect(server.url, { responseTimeout: RT });
    assert.equal(c.responseTimeout, RT);
    const held = await c.lock(key('hang'), { lease: 1500 }).acquire();
    const released = await c.lock(key('hang')).acquire();
    const lost = new Promise((r) => held.lost.addEventListener('abort', r, { once: true }));
    stop();
    const t0 = performance.now();
    try {
      for (const call of [
        () => released.release(),
        () => held.renew(),
        () => c.lock(key('hang0')).acquire({ timeout: 0 }),
        () => c.waiters('x'),
      ]) {
        const r = await timed(call());
        assert.ok(
          !r.ok && r.e instanceof ResponseTimeoutError && r.e instanceof ServerConnectionError,
          String(r.e),
        );
        assert.match(r.e.message, new RegExp(server.address));
        assert.ok(r.ms < RT + SLACK, `answered after ${r.ms} ms`);
      }
      await lost;
      const at = performance.now() - t0;
      assert.equal(held.lostReason, 'lease_expired');
      assert.ok(at < 1500 + SLACK, `lost after ${at} ms`);
    } finally {
      cont();
    }
  });

  it('a wait answers within its time-out plus one response time-out, and leaves nothing queued', async () => {
    other = await Client.connect(server.url);
    const k = key('hangwait');
    const holder = await other.lock(k).acquire();
    const waiting = timed(c.lock(k).acquire({ timeout: 1000 }));
    await until('queued', async () => (await other.waiters(k)).length === 1);
    stop();
    let r;
    try {
      r = await waiting;
    } finally {
      cont();
    }
    assert.ok(!r.ok && r.e instanceof ResponseTimeoutError, String(r.e));
    assert.ok(r.ms < 1000 + RT + SLACK, `answered after ${r.ms} ms`);
    await until('queue empty', async () => (await other.waiters(k)).length === 0);
    await holder.release();
    assert.equal(
      (await other.info(k)).holders.length,
      0,
      'nothing granted to the wait that gave up',
    );
  });

  it('Client.connect() to a hung server fails within one response time-out and leaves nothing open', async () => {
    const raw = await server.redis();
    const before = await clientCount(raw);
    stop();
    let r;
    try {
      r = await timed(Client.connect(server.url, { responseTimeout: RT }));
    } finally {
      cont();
    }
    assert.ok(!r.ok && r.e instanceof ResponseTimeoutError, String(r.e));
    assert.ok(r.ms < RT + SLACK, `answered after ${r.ms} ms`);
    await until('connections back to before', async () => (await clientCount(raw)) === before);
    raw.destroy();
  });

  it('close() with the server hung ends within one response time-out, and a pending wait with ClosedError', async () => {
    const k = key('hangclose');
    const holder = await other.lock(k).acquire();
    const mine = await Client.connect(server.url, { responseTimeout: RT });
    const waiting = timed(mine.lock(k).acquire());
    await until('queued', async () => (await other.waiters(k)).length === 1);
    stop();
    let closing;
    try {
      closing = await timed(mine.close());
    } finally {
      cont();
    }
    assert.ok(closing.ok, String(closing.e));
    assert.ok(closing.ms < RT + SLACK, `closed after ${closing.ms} ms`);
    const w = await waiting;
    assert.ok(!w.ok && w.e instanceof ClosedError, String(w.e));
    await until('queue empty', async () => (await other.waiters(k)).length === 0);
    await holder.release();
  });
});

describe('closed is closed', () => {
  let server;
  let plain;
  let raw;
  before(async () => {
    [server, plain] = await Promise.all([Server.start(), Server.start({ module: false })]);
    raw = await server.redis();
  });
  after(async () => {
    raw?.destroy();
    await Promise.all([server?.stop(), plain?.stop()]);
  });

  it('after close every call throws ClosedError, holds are lost (closed), pending waits end', async () => {
    const c = await Client.connect(server.url);
    const k = key('closed');
    const held = await c.lock(k).acquire();
    const waiting = c.lock(k).acquire({ timeout: 30_000 });
    await until('queued', async () => (await c.waiters(k)).length === 1);
    await c.close();
    await assert.rejects(waiting, ClosedError);
    assert.equal(held.lostReason, 'closed');
    assert.equal(held.lost.reason.reason, 'closed');
    for (const call of [
      () => held.release(),
      () => held.renew(),
      () => c.lock(k).acquire({ timeout: 0 }),
      () => c.lock(k).acquire({ timeout: 1000 }),
      () => c.waiters(k),
      () => c.info(k),
      () => c.ready(),
    ]) {
      await assert.rejects(
        call(),
        (e) => e instanceof ClosedError && e.message.includes(server.address),
      );
    }
    await c.close(); // twice: nothing happens
  });

  for (const [backend, srv] of [
    ['native', () => server],
    ['script', () => plain],
  ]) {
    it(`${backend} backend: close with a hold and 5 waiters leaves CLIENT LIST as before`, async () => {
      const r = await srv().redis();
      try {
        const before = await clientCount(r);
        const c = await Client.connect(srv().url);
        assert.equal(c.native, backend === 'native');
        const k = key('leaves');
        await c.lock(k).acquire();
        const waits = Array.from({ length: 5 }, () => c.lock(k).acquire({ timeout: 30_000 }));
        await until(
          'all waiting',
          async () => (await clientCount(r)) >= before + (backend === 'native' ? 6 : 2),
        );
        await c.close();
        for (const w of await Promise.allSettled(waits))
          assert.ok(w.status === 'rejected' && w.reason instanceof ClosedError, String(w.reason));
        await until(
          'connections back to before',
          async () => (await clientCount(r)) === before,
          3000,
        );
      } finally {
        r.destroy();
      }
    });
  }

  it('the process ends by itself after close (8 workers x 5 acquires, script and native backends)', async () => {
    for (const s of [plain, server]) {
      const r = await runChild([s.url, 'waiters']);
      assert.equal(r.code, 0, r.err);
      const got = JSON.parse(r.out);
      assert.equal(got.native, s === server);
      assert.deepEqual([got.closed, got.lostReason], [8, 'closed']);
      // The first fallback to the scripts in a process is reported, once.
      assert.equal(
        r.err.split('DlockWarning: dlock module not loaded on').length - 1,
        s === plain ? 1 : 0,
        r.err,
      );
    }
  });

  it('bad options are a ConfigError, and leave nothing open (the process ends by itself)', async () => {
    const before = await clientCount(raw);
    for (const mode of ['bogus', 'bind']) {
      const r = await runChild([server.url, mode]);
      assert.equal(r.code, 0, r.err);
      assert.deepEqual(JSON.parse(r.out), { config: true });
    }
    await assert.rejects(Client.connect(server.url, { responseTimeout: 0 }), ConfigError);
    await assert.rejects(Client.connect(server.url, { responseTimeout: NaN }), ConfigError);
    assert.equal(await clientCount(raw), before);
  });
});

describe('one answer per mistake', () => {
  let server;
  let c;
  before(async () => {
    server = await Server.start();
    c = await Client.connect(server.url);
  });
  after(async () => {
    await c?.close();
    await server?.stop();
  });

  it('release twice, or after the hold was lost: NotHeldError, every time', async () => {
    const held = await c.lock(key('twice')).acquire();
    assert.equal(await held.release(), true);
    for (let i = 0; i < 2; i++)
      await assert.rejects(
        held.release(),
        (e) => e instanceof NotHeldError && e.reason === 'released',
      );
    assert.equal(held.lostReason, 'released');
    const k = key('lostrel');
    const lost = await c.lock(k, { lease: 300 }).acquire();
    const raw = await server.redis();
    await raw.del(k);
    raw.destroy();
    await until('lost', () => lost.isLost, 3000);
    for (let i = 0; i < 2; i++)
      await assert.rejects(
        lost.release(),
        (e) => e instanceof NotHeldError && e.reason === 'not_held',
      );
  });

  it('a hold lost to its local deadline is given back by its release, once, which still rejects', async () => {
    const b = await Client.connect(server.url, { bind: 300 });
    const raw = await server.redis();
    try {
      const k = key('giveback');
      const held = await b.lock(k, { lease: 30_000 }).acquire();
      const end = performance.now() + 700;
      while (performance.now() < end); // the event loop stalls past the grace: no sign of life
      assert.equal(held.lostReason, 'lease_expired');
      assert.equal(await raw.exists(k), 1, 'the server still has it (its connection is open)');
      await assert.rejects(
        held.release(),
        (e) => e instanceof NotHeldError && e.reason === 'lease_expired',
      );
      assert.equal(await raw.exists(k), 0, 'given back');
      const again = await b.lock(k).acquire({ owner: held.owner, timeout: 0 });
      await assert.rejects(
        held.release(),
        (e) => e instanceof NotHeldError && e.reason === 'lease_expired',
      );
      assert.equal(
        await raw.exists(k),
        1,
        'a second release sends nothing: the owner holds it again',
      );
      await again.release();
    } finally {
      raw.destroy();
      await b.close();
    }
  });

  it('a negative, NaN or infinite time-out or lease is a ConfigError, and nothing is sent', async () => {
    const k = key('badtime');
    for (const timeout of [-1, NaN, Infinity, -Infinity]) {
      await assert.rejects(c.lock(k).acquire({ timeout }), ConfigError, String(timeout));
    }
    for (const lease of [-1, NaN, Infinity, 0])
      assert.throws(() => c.lock(k, { lease }), ConfigError, String(lease));
    assert.equal((await c.info(k)).kind, 'none');
  });

  it('a semaphore without its capacity is a ConfigError where it is made', () => {
    assert.throws(
      () => c.semaphore('s'),
      (e) => e instanceof ConfigError && /capacity/.test(e.message),
    );
    assert.throws(() => c.semaphore('s', {}), ConfigError);
  });
});
