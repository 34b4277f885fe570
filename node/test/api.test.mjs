// The package against real redis-server processes with the module: locks, read-write locks,
// semaphores, waits, cancellation, the watchdog and `lost`, server features and errors.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from 'redis';
import {
  Client,
  DeadlockError,
  LostError,
  NotHeldError,
  ModuleNotLoadedError,
  WrongTypeError,
  ConfigError,
  AcquireTimeoutError,
  ServerConnectionError,
} from 'dlock-client';
import { Server, until } from './servers.mjs';
import { isUnknownOption, renewCommand } from '../dist/esm/protocol.js';

let server;
let raw;
const clients = [];
async function client(opts) {
  const c = await Client.connect(server.url, opts);
  clients.push(c);
  return c;
}
let n = 0;
const key = (what) => `${what}:${++n}`;
const busy = (ms) => {
  const end = performance.now() + ms;
  while (performance.now() < end);
};

before(async () => {
  server = await Server.start();
  raw = await server.redis();
});
after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  raw?.destroy();
  await server?.stop();
});

describe('locks', () => {
  it('acquires, fences, re-enters per owner and releases', async () => {
    const c = await client();
    const k = key('lock');
    const held = await c.lock(k, { lease: 10_000, fence: true }).acquire({ timeout: 0 });
    assert.ok(held);
    assert.equal(held.count, 1);
    assert.equal(typeof held.token, 'number');
    assert.equal(held.lost.aborted, false);
    const again = await c.lock(k, { fence: true }).acquire({ owner: held.owner, timeout: 0 });
    assert.equal(again.count, 2);
    assert.equal(again.token, held.token);
    assert.equal(await again.release(), false); // one hold left
    assert.equal(await held.release(), true);
    assert.equal(await raw.exists(k), 0);
    assert.equal(held.lost.aborted, false, 'released, not lost');
    await assert.rejects(
      held.release(),
      (e) => e instanceof NotHeldError && e.reason === 'released',
    );
  });

  it('two concurrent acquires in one process are different owners', async () => {
    const c = await client();
    const k = key('owners');
    const [a, b] = await Promise.all([
      c.lock(k).acquire({ timeout: 0 }),
      c.lock(k).acquire({ timeout: 0 }),
    ]);
    assert.equal([a, b].filter(Boolean).length, 1, 'exactly one granted');
    await (a ?? b).release();
  });

  it('waits in FIFO order, hands over on release, and times out with null', async () => {
    const c = await client();
    const k = key('fifo');
    const first = await c.lock(k, { fence: true }).acquire();
    const order = [];
    const w1 = c
      .lock(k, { fence: true })
      .acquire({ timeout: 10_000 })
      .then((h) => (order.push(1), h));
    await until('1 waiter', async () => (await c.waiters(k)).length === 1);
    const w2 = c
      .lock(k, { fence: true })
      .acquire({ timeout: 10_000 })
      .then((h) => (order.push(2), h));
    await until('2 waiters', async () => (await c.waiters(k)).length === 2);
    const t0 = performance.now();
    const none = await c.lock(k).acquire({ timeout: 200 });
    const took = performance.now() - t0;
    assert.equal(none, null);
    assert.ok(took >= 190 && took < 2000, `timed out after ${took} ms`);
    await first.release();
    const h1 = await w1;
    assert.ok(h1.token > first.token);
    await h1.release();
    const h2 = await w2;
    assert.deepEqual(order, [1, 2]);
    await h2.release();
  });

  it('a grant after a wait longer than its lease is confirmed, not born lost', async () => {
    const c = await client({ bind: null });
    const k = key('longwait');
    const holder = await c.lock(k, { lease: 60_000 }).acquire();
    const waiting = c.lock(k, { lease: 500 }).acquire({ timeout: 5000 });
    await sleep(900); // longer than the waiter's lease
    await holder.release();
    const held = await waiting;
    assert.ok(held);
    assert.equal(held.lost.aborted, false);
    await sleep(700); // renewed meanwhile
    assert.equal(held.lost.aborted, false);
    assert.equal((await c.info(k)).holders[0].owner, held.owner);
    await held.release();
  });

  it('using() runs the callback holding the lock and releases it', async () => {
    const c = await client();
    const k = key('using');
    const r = await c.using(k, { lease: 5000, timeout: 1000 }, async (held) => {
      assert.equal((await c.info(k)).holders[0].owner, held.owner);
      return 42;
    });
    assert.equal(r, 42);
    assert.equal(await raw.exists(k), 0);
    const blocker = await c.lock(k).acquire();
    await assert.rejects(
      c.using(k, { timeout: 0 }, () => 1),
      AcquireTimeoutError,
    );
    await blocker.release();
  });

  it('refuses bad arguments where the lock is made', async () => {
    const c = await client();
    assert.throws(() => c.lock('x', { lease: 0 }), ConfigError);
    assert.throws(() => c.lock('x', { lockDelay: 120_000 }), ConfigError);
    assert.throws(() => c.semaphore('x', { capacity: 0 }), ConfigError);
    assert.throws(() => new Client(createClient(), { bind: -1 }), ConfigError);
  });
});

describe('cancellation', () => {
  it('an aborted signal rejects the wait and leaves nothing held or queued', async () => {
    const c = await client();
    const k = key('abort');
    const holder = await c.lock(k).acquire();
    const ctrl = new AbortController();
    const waiting = c.lock(k).acquire({ signal: ctrl.signal });
    await until('queued', async () => (await c.waiters(k)).length === 1);
    ctrl.abort();
    await assert.rejects(waiting, (e) => e.name === 'AbortError');
    await until('queue empty', async () => (await c.waiters(k)).length === 0);
    await holder.release();
    assert.equal(await raw.exists(k), 0, 'the cancelled waiter was granted nothing');
  });

  it('a signal aborted before the call rejects at once', async () => {
    const c = await client();
    await assert.rejects(
      c.lock(key('pre')).acquire({ signal: AbortSignal.abort() }),
      (e) => e.name === 'AbortError',
    );
  });

  it('AbortSignal.timeout bounds a wait like timeout does, and keeps the owner', async () => {
    const c = await client();
    const k = key('sigtimeout');
    const held = await c.lock(k).acquire();
    await assert.rejects(
      c.lock(k).acquire({ signal: AbortSignal.timeout(100) }),
      (e) => e.name === 'TimeoutError',
    );
    // Through the same owner the reentrant acquire is granted at once, signal or not.
    const again = await c.lock(k).acquire({ owner: held.owner, signal: AbortSignal.timeout(1000) });
    assert.equal(again.count, 2);
    await again.release();
    await held.release();
    assert.equal((await c.waiters(k)).length, 0);
  });
});

describe('the watchdog and lost', () => {
  it('renews holds past their lease', async () => {
    const c = await client();
    const k = key('renew');
    const held = await c.lock(k, { lease: 300 }).acquire();
    await sleep(1000);
    assert.equal(held.lost.aborted, false);
    assert.ok((await raw.pTTL(k)) > 0);
    await held.release();
  });

  it('renew() renews now, and rejects with NotHeldError once the hold is gone', async () => {
    const c = await client();
    const k = key('explicit');
    const held = await c.lock(k, { lease: 5000 }).acquire();
    await raw.pExpire(k, 1000);
    assert.equal(await held.renew(), true);
    assert.ok((await raw.pTTL(k)) > 2000, 'the lease was set again');
    await raw.del(k);
    await assert.rejects(held.renew(), (e) => e instanceof NotHeldError && e.reason === 'not_held');
    assert.equal(held.lost.aborted, true);
    await assert.rejects(
      held.renew(),
      (e) => e instanceof NotHeldError && e.reason === 'not_held',
      'and again',
    );
  });

  it('aborts lost when a renewal answers 0 (the key was deleted)', async () => {
    const c = await client();
    const k = key('deleted');
    const held = await c.lock(k, { lease: 600 }).acquire();
    const lost = new Promise((r) => held.lost.addEventListener('abort', r, { once: true }));
    await raw.del(k);
    await lost;
    assert.equal(held.lost.reason.reason, 'not_held');
    assert.ok(held.lost.reason instanceof LostError);
    await assert.rejects(
      held.release(),
      (e) => e instanceof NotHeldError && e.reason === 'not_held',
    );
    await assert.rejects(
      held.release(),
      (e) => e instanceof NotHeldError && e.reason === 'not_held',
      'and again',
    );
  });

  it('a stalled event loop sees lost at once when the lease passed', async () => {
    const c = await client({ bind: null });
    const held = await c.lock(key('stall'), { lease: 300 }).acquire();
    busy(600); // no timer, no I/O can run
    assert.equal(held.lost.aborted, true, 'checked against the clock when read');
    assert.equal(held.lost.reason.reason, 'lease_expired');
  });

  it('a stalled process whose bound connection was closed sees lost at once', async () => {
    const c = await client({ bind: 300 });
    const k = key('bindstall');
    const held = await c.lock(k, { lease: 30_000 }).acquire();
    const ids = String(await raw.sendCommand(['CLIENT', 'LIST']))
      .split('\n')
      .filter((l) => l.includes('cmd=ping') || l.includes('cmd=dlock'))
      .map((l) => /id=(\d+)/.exec(l)[1]);
    assert.ok(ids.length > 0);
    // The event loop blocks while another process closes our connections and waits past the grace.
    const killer = spawnSync('sh', [
      '-c',
      `${ids.map((id) => `redis-cli -p ${server.port} CLIENT KILL ID ${id} >/dev/null;`).join(' ')} sleep 0.6`,
    ]);
    assert.equal(killer.status, 0);
    assert.equal(held.lost.aborted, true, 'lost without waiting for any event');
    assert.equal(held.lost.reason.reason, 'lease_expired');
    // The server did cut it: someone else gets the lock.
    const other = await (await client()).lock(k).acquire({ timeout: 2000 });
    assert.ok(other);
    await other.release();
  });

  it('no unhandled rejection escapes the watchdog when the server dies', async () => {
    const s = await Server.start();
    const c = await Client.connect(s.url);
    const unhandled = [];
    const onUnhandled = (e) => unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      const held = await c.lock('dies', { lease: 400 }).acquire();
      await s.stop();
      await new Promise((r) => held.lost.addEventListener('abort', r, { once: true }));
      assert.equal(held.lost.reason.reason, 'lease_expired');
      await sleep(300);
      assert.deepEqual(unhandled, []);
      await assert.rejects(c.lock('dies2').acquire({ timeout: 0 }), ServerConnectionError);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await c.close();
    }
  });
});

describe('read-write locks and semaphores', () => {
  it('readers share, a writer waits for them', async () => {
    const c = await client();
    const k = key('rw');
    const rw = c.rwlock(k, { lease: 5000 });
    const r1 = await rw.read().acquire({ timeout: 0 });
    const r2 = await rw.read().acquire({ timeout: 0 });
    assert.ok(r1 && r2);
    assert.equal(await rw.write().acquire({ timeout: 0 }), null);
    const w = rw.write().acquire({ timeout: 5000 });
    await until('writer queued', async () => (await c.waiters(k)).length === 1);
    assert.deepEqual(
      (await c.waiters(k)).map((x) => x.request),
      ['write'],
    );
    await r1.release();
    await r2.release();
    const wh = await w;
    assert.equal(wh.kind, 'write');
    const info = await c.info(k);
    assert.equal(info.kind, 'rwlock');
    assert.equal(info.mode, 'write');
    await wh.release();
  });

  it('a semaphore hands out permits FIFO', async () => {
    const c = await client();
    const k = key('sem');
    const pool = c.semaphore(k, { capacity: 3, lease: 5000 });
    const a = await pool.acquire({ count: 2, timeout: 0 });
    assert.equal(a.permits, 2);
    assert.equal(await pool.acquire({ count: 2, timeout: 0 }), null);
    const b = pool.acquire({ count: 2, timeout: 5000 });
    await until('queued', async () => (await c.waiters(k)).length === 1);
    const info = await c.info(k);
    assert.equal(info.capacity, 3);
    assert.equal(info.available, 1);
    assert.equal(await a.release(), true);
    const bh = await b;
    assert.equal(bh.permits, 2);
    await bh.release();
  });
});

describe('server features and errors', () => {
  it('BIND is used where the module has it (learnt with the backend), and can be turned off', async () => {
    const c = await client();
    assert.equal(c.bind, 2000, 'this module takes BIND: the default grace');
    assert.equal((await client({ bind: 300 })).bind, 300);
    assert.equal((await client({ bind: null })).bind, null);
    // What tells a module older than BIND apart (it answers the first command carrying BIND
    // with one of these), and what does not.
    assert.ok(isUnknownOption('ERR syntax error'));
    assert.ok(isUnknownOption("ERR wrong number of arguments for 'dlock.renew' command"));
    assert.ok(
      !isUnknownOption('WRONGTYPE Operation against a key holding the wrong kind of value'),
    );
    assert.ok(!isUnknownOption(null));
  });

  it('the default grace goes as a bare BIND (the module takes 2 s, or the lease when shorter)', () => {
    assert.deepEqual(renewCommand('k', 'o', 30000, 2000), [
      'DLOCK.RENEW',
      'k',
      'o',
      '30000',
      'BIND',
    ]);
    assert.deepEqual(renewCommand('k', 'o', 1000, 2000), ['DLOCK.RENEW', 'k', 'o', '1000', 'BIND']);
    assert.deepEqual(renewCommand('k', 'o', 1000, 500), [
      'DLOCK.RENEW',
      'k',
      'o',
      '1000',
      'BIND',
      '500',
    ]);
    assert.deepEqual(renewCommand('k', 'o', 30000, 3000), [
      'DLOCK.RENEW',
      'k',
      'o',
      '30000',
      'BIND',
      '3000',
    ]);
    assert.deepEqual(renewCommand('k', 'o', 30000, null), ['DLOCK.RENEW', 'k', 'o', '30000']);
  });

  it('lockDelay keeps the lock after a hold ended without release', async () => {
    const c = await client({ bind: null });
    const k = key('delay');
    const other = await client();
    const held = await c.lock(k, { lease: 200, lockDelay: 1500 }).acquire();
    await c.close(); // no release, no renewal: the lease lapses
    await until('lapsed', async () => held.lost.aborted && (await raw.exists(k)) === 0);
    assert.ok((await other.info(k)).delayMs > 0);
    assert.equal(await other.lock(k).acquire({ timeout: 0 }), null);
  });

  it('DeadlockError names the cycle', async () => {
    const c = await client();
    const [k1, k2] = [key('dl'), key('dl')];
    const a = await c.lock(k1).acquire();
    const b = await c.lock(k2).acquire();
    const bWaits = c.lock(k1).acquire({ owner: b.owner, timeout: 5000 });
    await until('b queued', async () => (await c.waiters(k1)).length === 1);
    const err = await c
      .lock(k2)
      .acquire({ owner: a.owner, timeout: 5000 })
      .catch((e) => e);
    assert.ok(err instanceof DeadlockError, String(err));
    assert.match(err.cycle, new RegExp(`${a.owner} waits for ${k2} held by ${b.owner}`));
    assert.equal(err.server, server.address);
    await a.release();
    (await bWaits).release();
    await b.release();
  });

  it('WRONGTYPE is a WrongTypeError naming the server, cause kept', async () => {
    const c = await client();
    const k = key('wrong');
    await raw.set(k, 'x');
    const err = await c
      .lock(k)
      .acquire({ timeout: 0 })
      .catch((e) => e);
    assert.ok(err instanceof WrongTypeError);
    assert.match(err.message, new RegExp(server.address));
    assert.ok(err.cause instanceof Error);
  });

  it('waiters() and info() are typed', async () => {
    const c = await client();
    const k = key('typed');
    const held = await c.lock(k, { lease: 5000, fence: true }).acquire();
    const w = c.lock(k).acquire({ timeout: 3000 });
    await until('queued', async () => (await c.waiters(k)).length === 1);
    const [row] = await c.waiters(k);
    assert.equal(row.request, 'lock');
    assert.ok(row.timeoutLeftMs > 0 && row.timeoutLeftMs <= 3000);
    const info = await c.info(k);
    assert.deepEqual(
      [info.kind, info.mode, info.waiters, info.fence],
      ['lock', 'exclusive', 1, held.token],
    );
    assert.equal(info.holders[0].owner, held.owner);
    await held.release();
    await (await w).release();
  });

  it('a connection that cannot be made is a ServerConnectionError naming the server', async () => {
    const err = await Client.connect(`redis://127.0.0.1:1/0`).catch((e) => e);
    assert.ok(err instanceof ServerConnectionError, String(err));
    assert.match(err.message, /127\.0\.0\.1:1\b/);
    assert.ok(err.cause instanceof Error);
  });
});

describe('script backend (no module)', () => {
  let plain;
  before(async () => {
    plain = await Server.start({ module: false });
  });
  after(async () => plain?.stop());

  it('backend native says which server lacks the module', async () => {
    const err = await Client.connect(plain.url, { backend: 'native' }).catch((e) => e);
    assert.ok(err instanceof ModuleNotLoadedError);
    assert.equal(err.message, `dlock module not loaded on ${plain.address}`);
  });

  it('auto falls back to the scripts on Redisson layout: lock, wait, hand-off, lost', async () => {
    const c = await Client.connect(plain.url);
    const p = await plain.redis();
    try {
      assert.equal(c.native, false);
      const k = 'script:lock';
      const held = await c.lock(k, { lease: 5000 }).acquire();
      // Redisson's hash (node-redis 5.0: a null-prototype object).
      assert.deepEqual({ ...(await p.hGetAll(k)) }, { [held.owner]: '1' });
      const waiting = c.lock(k, { lease: 600 }).acquire({ timeout: 5000 });
      await sleep(50);
      const t0 = performance.now();
      await held.release();
      const next = await waiting;
      assert.ok(next);
      assert.ok(performance.now() - t0 < 1000, 'woken by the unlock message');
      await p.del(k);
      await until('lost', () => next.lost.aborted, 5000);
      assert.equal(next.lost.reason.reason, 'not_held');
      await assert.rejects(
        c.lock(k, { fence: true }).acquire(),
        (e) => e.name === 'NotSupportedError',
      );
      const sem = c.semaphore('script:sem', { capacity: 2 });
      const s1 = await sem.acquire({ count: 2 });
      assert.equal(await sem.acquire({ timeout: 100 }), null);
      await s1.release();
      const rw = c.rwlock('script:rw');
      const r = await rw.read().acquire();
      assert.equal(await rw.write().acquire({ timeout: 0 }), null);
      await r.release();
    } finally {
      p.destroy();
      await c.close();
    }
  });
});
