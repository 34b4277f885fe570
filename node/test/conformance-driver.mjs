#!/usr/bin/env node
// The conformance suite's driver for dlock-client (protocol: conformance/README.md): JSON
// requests on stdin, one reply each on stdout, handled concurrently; plus the "lost" and
// "alive" events from sampling `held.lost` every sample_ms.
import { createInterface } from 'node:readline';
import { Client } from 'dlock-client';

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const write = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

let client = null;
let sampleMs = 2;
const owners = new Map(); // label -> owner id
const holds = new Map(); // hold name -> { held, lastHeldUs, lostSent }
const pending = new Map(); // request id -> AbortController of a pending acquire

const ownerOf = (label = 'main') => {
  if (!owners.has(label)) owners.set(label, client.newOwner());
  return owners.get(label);
};

const REASONS = { 'not-held': 'not_held', 'lease-expired': 'lease_expired', 'bind-grace-passed': 'bind_grace_passed', released: 'released', 'client-closed': 'closed' };

function errorKind(e) {
  switch (e?.name) {
    case 'LostError':
      return e.reason === 'released' ? 'other' : 'not_held';
    case 'DeadlockError':
      return 'deadlock';
    case 'WrongTypeError':
      return 'wrong_type';
    case 'ModuleNotLoadedError':
      return 'module_not_loaded';
    case 'ServerConnectionError':
      return 'connection';
    case 'ConfigError':
      return 'config';
    case 'NotSupportedError':
      return 'unsupported';
    case 'AbortError':
    case 'TimeoutError':
      return 'cancelled';
    case 'RedirectError':
      return 'redirected';
    default:
      return 'other';
  }
}

function sample() {
  for (const [name, h] of holds) {
    if (h.lostSent) continue;
    const a = nowUs();
    const lost = h.held.isLost;
    const b = nowUs();
    if (b - a >= 1000) continue; // straddled a pause: says nothing
    if (!lost) h.lastHeldUs = b;
    else {
      h.lostSent = true;
      write({ event: 'lost', hold: name, t_us: b, last_held_us: h.lastHeldUs, reason: REASONS[h.held.lost.reason?.reason] ?? 'other' });
    }
  }
}

const ops = {
  async connect(r) {
    const opts = { backend: r.backend ?? 'auto' };
    if ('bind_ms' in r) opts.bind = r.bind_ms;
    if (r.sample_ms) sampleMs = r.sample_ms;
    if (r.topology === 'cluster') client = await Client.connectCluster(r.nodes.map((n) => `redis://${n}`), opts);
    else if (r.topology === 'sentinel') client = await Client.connectSentinel(r.sentinels, r.service, opts);
    else client = await Client.connect(r.url, opts);
    await client.ready();
    setInterval(sample, sampleMs);
    setInterval(() => write({ event: 'alive', t_us: nowUs(), held: [...holds].filter(([, h]) => !h.lostSent).map(([n]) => n) }), 50);
    return { native: client.native };
  },

  async acquire(r) {
    const opts = { lease: r.lease_ms ?? 30_000 };
    if (r.fence) opts.fence = true;
    if (r.lock_delay_ms !== undefined && r.lock_delay_ms !== null) opts.lockDelay = r.lock_delay_ms;
    const kind = r.kind ?? 'lock';
    const lock =
      kind === 'semaphore'
        ? client.semaphore(r.key, { capacity: r.capacity, lease: opts.lease })
        : kind === 'lock'
          ? client.lock(r.key, opts)
          : client.rwlock(r.key, opts)[kind]();
    const ctrl = new AbortController();
    pending.set(r.id, ctrl);
    const acq = { owner: ownerOf(r.owner), signal: ctrl.signal };
    // wait_ms: null = no limit; absent or 0 = no wait.
    if (r.wait_ms !== null) acq.timeout = r.wait_ms ?? 0;
    if (kind === 'semaphore' && r.count) acq.count = r.count;
    try {
      const held = await lock.acquire(acq);
      if (!held) return { granted: false };
      holds.set(r.hold, { held, lastHeldUs: nowUs(), lostSent: false });
      return { granted: true, count: held.count, token: held.token };
    } finally {
      pending.delete(r.id);
    }
  },

  async release(r) {
    const h = holds.get(r.hold);
    if (!h) throw Object.assign(new Error(`no hold ${r.hold}`), { name: 'LostError', reason: 'not-held' });
    holds.delete(r.hold); // its interval ends at this call
    return { released: await h.held.release() };
  },

  async renew(r) {
    return { renewed: await holds.get(r.hold).held.renew() };
  },

  async held(r) {
    const h = holds.get(r.hold);
    if (!h) return { held: false, reason: 'released' };
    const lost = h.held.lost;
    return lost.aborted ? { held: false, reason: REASONS[lost.reason?.reason] ?? 'other' } : { held: true };
  },

  async cancel(r) {
    pending.get(r.target)?.abort();
    return {};
  },

  async waiters(r) {
    return { waiters: (await client.waiters(r.key)).map((w) => [w.owner, w.request, w.waitedMs, w.timeoutLeftMs]) };
  },

  async info(r) {
    const i = await client.info(r.key);
    return { info: { kind: i.kind, holders: i.holders.map((h) => [h.owner, h.count, h.leaseMs]), waiters: i.waiters } };
  },

  async owner_id(r) {
    return { owner_id: ownerOf(r.owner) };
  },

  async close() {
    await client?.close();
    setImmediate(() => process.exit(0));
    return {};
  },
};

async function handle(r) {
  const sent_us = nowUs();
  try {
    const op = ops[r.op];
    if (!op) throw Object.assign(new Error(`unknown op ${r.op}`), { name: 'NotSupportedError' });
    const fields = await op(r);
    write({ id: r.id, ok: true, sent_us, t_us: nowUs(), ...fields });
  } catch (e) {
    write({ id: r.id, ok: false, sent_us, t_us: nowUs(), error: { kind: errorKind(e), class: e?.name ?? 'Error', message: String(e?.message ?? e) } });
  }
}

createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim()) handle(JSON.parse(line));
}).on('close', async () => {
  await client?.close();
  process.exit(0);
});
