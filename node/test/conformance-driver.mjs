#!/usr/bin/env node
// The conformance suite's driver for dlock-client (protocol: conformance/README.md): JSON
// requests on stdin, one reply each on stdout, handled concurrently; plus the "lost" and
// "alive" events from sampling `held.lost` every sample_ms. It never forces its exit: after
// stdin closes it closes the client and stops its own timers, and the process ends because
// nothing the client opened keeps it alive (the runner checks that).
import { createInterface } from 'node:readline';
import { Client } from 'dlock-client';

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const write = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

let client = null;
let sampleMs = 2;
const timers = [];
const owners = new Map(); // label -> owner id
// hold name -> { held, lastHeldUs, lostSent, done }; kept after a release or a loss, so that
// later requests ask the client about the same hold object (`done`: its interval has ended).
const holds = new Map();
const pending = new Map(); // request id -> AbortController of a pending acquire

const ownerOf = (label = 'main') => {
  if (!owners.has(label)) owners.set(label, client.newOwner());
  return owners.get(label);
};

// JSON has no NaN or infinities: the scenarios spell them as strings.
const NUMBERS = { nan: NaN, inf: Infinity, '-inf': -Infinity };
const num = (v) => (typeof v === 'string' && v in NUMBERS ? NUMBERS[v] : v);

function errorKind(e) {
  switch (e?.name) {
    case 'NotHeldError':
    case 'LostError':
      return 'not_held';
    case 'ClosedError':
      return 'closed';
    case 'ResponseTimeoutError':
      return 'timeout';
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
    if (h.lostSent || h.done) continue;
    const a = nowUs();
    const lost = h.held.isLost;
    const b = nowUs();
    if (b - a >= 1000) continue; // straddled a pause: says nothing
    if (!lost) h.lastHeldUs = b;
    else {
      h.lostSent = true;
      write({
        event: 'lost',
        hold: name,
        t_us: b,
        last_held_us: h.lastHeldUs,
        reason: h.held.lostReason,
      });
    }
  }
}

const ops = {
  async connect(r) {
    // Passed as given: a bad one is the client's to refuse.
    const opts = { backend: r.backend ?? 'auto' };
    if ('bind_ms' in r) opts.bind = r.bind_ms;
    if ('response_timeout_ms' in r) opts.responseTimeout = r.response_timeout_ms;
    if (r.sample_ms) sampleMs = r.sample_ms;
    if (r.topology === 'cluster')
      client = await Client.connectCluster(
        r.nodes.map((n) => `redis://${n}`),
        opts,
      );
    else if (r.topology === 'sentinel')
      client = await Client.connectSentinel(r.sentinels, r.service, opts);
    else client = await Client.connect(r.url, opts);
    await client.ready();
    if (timers.length === 0) {
      timers.push(setInterval(sample, sampleMs));
      timers.push(
        setInterval(
          () =>
            write({
              event: 'alive',
              t_us: nowUs(),
              held: [...holds].filter(([, h]) => !h.lostSent && !h.done).map(([n]) => n),
            }),
          50,
        ),
      );
    }
    return { native: client.native };
  },

  async acquire(r) {
    const opts = { lease: num(r.lease_ms) ?? 30_000 };
    if (r.fence) opts.fence = true;
    if (r.lock_delay_ms !== undefined && r.lock_delay_ms !== null) opts.lockDelay = r.lock_delay_ms;
    const kind = r.kind ?? 'lock';
    const lock =
      kind === 'semaphore'
        ? r.capacity === undefined
          ? client.semaphore(r.key) // the mistake the scenario makes: the client refuses it
          : client.semaphore(r.key, { capacity: r.capacity, lease: opts.lease })
        : kind === 'lock'
          ? client.lock(r.key, opts)
          : client.rwlock(r.key, opts)[kind]();
    const ctrl = new AbortController();
    pending.set(r.id, ctrl);
    const acq = { owner: ownerOf(r.owner), signal: ctrl.signal };
    // wait_ms: null = no limit; absent or 0 = no wait.
    if (r.wait_ms !== null) acq.timeout = num(r.wait_ms) ?? 0;
    if (kind === 'semaphore' && r.count) acq.count = r.count;
    try {
      const held = await lock.acquire(acq);
      if (!held) return { granted: false };
      holds.set(r.hold, { held, lastHeldUs: nowUs(), lostSent: false, done: false });
      return { granted: true, count: held.count, token: held.token };
    } finally {
      pending.delete(r.id);
    }
  },

  async release(r) {
    const h = holds.get(r.hold);
    h.done = true; // its interval ends at this call
    return { released: await h.held.release() };
  },

  async renew(r) {
    return { renewed: await holds.get(r.hold).held.renew() };
  },

  async held(r) {
    const h = holds.get(r.hold);
    if (!h) return { held: false }; // never granted (a wait that ended without a hold)
    const reason = h.held.lostReason;
    return reason === null ? { held: true } : { held: false, reason };
  },

  async cancel(r) {
    pending.get(r.target)?.abort();
    return {};
  },

  async waiters(r) {
    return {
      waiters: (await client.waiters(r.key)).map((w) => [
        w.owner,
        w.request,
        w.waitedMs,
        w.timeoutLeftMs,
      ]),
    };
  },

  async info(r) {
    const i = await client.info(r.key);
    return {
      info: {
        kind: i.kind,
        holders: i.holders.map((h) => [h.owner, h.count, h.leaseMs]),
        waiters: i.waiters,
      },
    };
  },

  async owner_id(r) {
    return { owner_id: ownerOf(r.owner) };
  },

  async close() {
    await client?.close(); // releases nothing; later requests get the closed client's answers
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
    write({
      id: r.id,
      ok: false,
      sent_us,
      t_us: nowUs(),
      error: { kind: errorKind(e), class: e?.name ?? 'Error', message: String(e?.message ?? e) },
    });
  }
}

createInterface({ input: process.stdin })
  .on('line', (line) => {
    if (line.trim()) handle(JSON.parse(line));
  })
  .on('close', async () => {
    await client?.close();
    for (const t of timers) clearInterval(t);
  });
