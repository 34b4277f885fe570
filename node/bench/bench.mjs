#!/usr/bin/env node
// dlock-client against redlock and redis-semaphore on one redis-server (with the module; the
// two peers use plain keys and Lua there), in one run:
//   - client CPU per uncontended acquire + release (process.cpuUsage over sequential cycles;
//     the libraries take turns, --rounds rounds of --cycles/--rounds cycles each, and each
//     one's figure is the median of its rounds, so a burst of load on this shared machine
//     does not land on one library's whole measurement). Beside them, the same figure for a
//     bare SET NX PX + DEL on each client library (node-redis as dlock-client sets it up,
//     and ioredis, which both peers run on): what the client library itself costs per
//     two-command cycle, apart from the lock package on top.
//   - hand-offs per second on one hot lock with 4 contenders (each: acquire, release, again),
//     also in turns (--rounds rounds of --seconds each per library, median). A hand-off is
//     the lock going to another contender; a contender re-taking the lock it just released
//     is counted as an acquire, not a hand-off.
//   - p99 of the wait of those contended acquires (all rounds), of all of them and of the
//     hand-offs alone (a polling lock's re-takes are quick; the contenders it passes over
//     wait), and the connections the server accepted during the rounds (a client that opened
//     one per wait would show it here).
// Each library runs with its own defaults, except that no acquire gives up (redlock:
// retryCount -1; redis-semaphore: acquireTimeout 60 s).
// Usage: node bench/bench.mjs [--seconds S] [--cycles N] [--rounds R] [--only cpu|handoff]
//          [--baseline DIR]   (DIR: another build of this package, e.g. a copy of an older
//                              dist/esm, run as one more library in the same turns)
import { loadavg } from 'node:os';
import Redis from 'ioredis';
import Redlock from 'redlock';
import { Mutex } from 'redis-semaphore';
import { createClient } from 'redis';
import { Client } from 'dlock-client';
import { Server } from '../test/servers.mjs';

const flag = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? dflt : process.argv[i + 1];
};
const SECONDS = Number(flag('--seconds', 2));
const CYCLES = Number(flag('--cycles', 3000));
const ROUNDS = Number(flag('--rounds', 5));
const ONLY = flag('--only', 'all');
const CONTENDERS = 4;
const LEASE = 10_000;

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const range = (xs) => `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}`;
function p99(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] ?? NaN;
}
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');

/**
 * Uncontended CPU per cycle of each entry of `makers` (name -> make), in turns: after a
 * warm-up of each, ROUNDS rounds in which every one runs CYCLES/ROUNDS sequential cycles.
 */
async function uncontended(makers) {
  const solos = [];
  for (const [name, make] of makers) {
    const solo = await make('solo');
    for (let i = 0; i < 500; i++) await solo.cycle(); // warm-up (connections, scripts, JIT)
    solos.push({ name, solo, cpus: [] });
  }
  const per = Math.max(1, Math.round(CYCLES / ROUNDS));
  for (let r = 0; r < ROUNDS; r++) {
    for (const s of solos) {
      const before = process.cpuUsage();
      for (let i = 0; i < per; i++) await s.solo.cycle();
      const d = process.cpuUsage(before);
      s.cpus.push((d.user + d.system) / per);
    }
  }
  for (const s of solos) await s.solo.close();
  return new Map(solos.map((s) => [s.name, s.cpus]));
}

/** One round of `cs` (contenders on one hot lock) for SECONDS: hand-offs, acquires, waits. */
async function hotRound(cs) {
  const waits = [];
  const handoffWaits = [];
  let handoffs = 0;
  let holder = -1;
  const start = performance.now();
  const end = start + SECONDS * 1000;
  await Promise.all(
    cs.map(async (c, me) => {
      while (performance.now() < end) {
        await c.cycle((waited) => {
          waits.push(waited);
          if (holder !== me && holder !== -1) {
            handoffs++;
            handoffWaits.push(waited);
          }
          holder = me;
        });
      }
    }),
  );
  const secs = (performance.now() - start) / 1000;
  return { rate: handoffs / secs, acquires: waits.length / secs, waits, handoffWaits };
}

/** The server's count of accepted connections. */
async function connectionsAccepted(admin) {
  const info = String(await admin.sendCommand(['INFO', 'stats']));
  return Number(/total_connections_received:(\d+)/.exec(info)[1]);
}

/** Contended figures of each library, in turns: ROUNDS rounds of SECONDS each. */
async function contended(makers, admin) {
  const libs = [];
  for (const [name, make] of makers) {
    const cs = await Promise.all(Array.from({ length: CONTENDERS }, () => make('hot')));
    await hotRound(cs); // warm-up (connections, scripts, JIT)
    libs.push({ name, cs, rates: [], acquires: [], waits: [], handoffWaits: [], conns: 0 });
  }
  for (let r = 0; r < ROUNDS; r++) {
    for (const l of libs) {
      const before = await connectionsAccepted(admin);
      const round = await hotRound(l.cs);
      l.conns += (await connectionsAccepted(admin)) - before;
      l.rates.push(round.rate);
      l.acquires.push(round.acquires);
      for (const w of round.waits) l.waits.push(w);
      for (const w of round.handoffWaits) l.handoffWaits.push(w);
    }
  }
  for (const l of libs) await Promise.all(l.cs.map((c) => c.close()));
  return new Map(libs.map((l) => [l.name, l]));
}

const server = await Server.start();
const admin = createClient({ url: server.url });
await admin.connect();

/** A contender on `key` of the package `pkg` (this one, or a --baseline build). */
const dlockClient = (pkg) => async (key) => {
  const c = await pkg.Client.connect(server.url);
  const lock = c.lock(`dlock:${key}`, { lease: LEASE });
  return {
    async cycle(onGranted) {
      const t = performance.now();
      const h = await lock.acquire();
      onGranted?.(performance.now() - t);
      await h.release();
    },
    close: () => c.close(),
  };
};
const BASELINE = flag('--baseline', null);

/** Each library as `make(key)`: a contender on `key` ({ cycle(onGranted?), close() }). */
const libraries = [
  ['dlock-client (node-redis 6.3)', dlockClient({ Client })],
  ...(BASELINE
    ? [[`dlock-client baseline ${BASELINE}`, dlockClient(await import(`${BASELINE}/index.js`))]]
    : []),
  [
    'redlock 4.2 (ioredis 6.0)',
    async (key) => {
      const r = new Redis({ port: server.port, host: '127.0.0.1' });
      const redlock = new Redlock([r], { retryCount: -1 });
      redlock.on('clientError', () => {});
      return {
        async cycle(onGranted) {
          const t = performance.now();
          const lock = await redlock.lock(`redlock:${key}`, LEASE);
          onGranted?.(performance.now() - t);
          await lock.unlock();
        },
        close: async () => r.disconnect(),
      };
    },
  ],
  [
    'redis-semaphore 5.8 Mutex (ioredis 6.0)',
    async (key) => {
      const r = new Redis({ port: server.port, host: '127.0.0.1' });
      return {
        async cycle(onGranted) {
          const m = new Mutex(r, `sem:${key}`, { lockTimeout: LEASE, acquireTimeout: 60_000 });
          const t = performance.now();
          await m.acquire();
          onGranted?.(performance.now() - t);
          await m.release();
        },
        close: async () => r.disconnect(),
      };
    },
  ],
];
/** The client libraries alone: SET NX PX then DEL, one round trip each, as the locks do. */
const bare = [
  [
    'bare SET+DEL, node-redis 6.3 (as dlock-client connects)',
    async (key) => {
      const c = createClient({
        url: server.url,
        disableOfflineQueue: true,
        commandOptions: { timeout: 0 },
      });
      await c.connect();
      return {
        async cycle() {
          await c.sendCommand(['SET', `bare:${key}`, 'x', 'NX', 'PX', String(LEASE)]);
          await c.sendCommand(['DEL', `bare:${key}`]);
        },
        close: async () => c.destroy(),
      };
    },
  ],
  [
    'bare SET+DEL, ioredis 6.0',
    async (key) => {
      const r = new Redis({ port: server.port, host: '127.0.0.1' });
      return {
        async cycle() {
          await r.set(`bare:${key}`, 'x', 'PX', LEASE, 'NX');
          await r.del(`bare:${key}`);
        },
        close: async () => r.disconnect(),
      };
    },
  ],
];

const loadBefore = load();
let cpu = new Map();
let hot = new Map();
try {
  if (ONLY !== 'handoff') cpu = await uncontended([...libraries, ...bare]);
  if (ONLY !== 'cpu') hot = await contended(libraries, admin);
} finally {
  admin.destroy();
  await server.stop();
}

const dl = libraries[0][0];
console.log(
  `Node clients on one redis-server (${new Date().toISOString().slice(0, 16)}Z; load average ${loadBefore} before, ${load()} after)`,
);
console.log(
  `Uncontended: ${CYCLES} cycles in ${ROUNDS} interleaved rounds, median µs (range); contended: ${CONTENDERS} contenders, ${ROUNDS} interleaved rounds of ${SECONDS} s, median (range).`,
);
console.log('');
console.log(
  '| client | client CPU per acquire+release | hand-offs/s (4 contenders) | acquires/s | p99 wait, all acquires | p99 wait, hand-offs | connections opened |',
);
console.log('|---|---|---|---|---|---|---|');
for (const [name] of libraries) {
  const c = cpu.get(name);
  const h = hot.get(name);
  const cpuCell = c ? `${median(c).toFixed(1)} µs (${range(c)})` : '–';
  const hotCells = h
    ? `${median(h.rates).toFixed(0)} (${Math.min(...h.rates).toFixed(0)}–${Math.max(...h.rates).toFixed(0)}) | ${median(h.acquires).toFixed(0)} | ${p99(h.waits).toFixed(1)} ms | ${p99(h.handoffWaits).toFixed(1)} ms | ${h.conns}`
    : '– | – | – | – | –';
  console.log(`| ${name} | ${cpuCell} | ${hotCells} |`);
}
for (const [name] of bare) {
  const c = cpu.get(name);
  if (c) console.log(`| ${name} | ${median(c).toFixed(1)} µs (${range(c)}) | | | | | |`);
}
console.log('');
for (const [name] of libraries.slice(1)) {
  const parts = [];
  if (cpu.size)
    parts.push(`${(median(cpu.get(dl)) / median(cpu.get(name))).toFixed(2)}× the CPU per cycle`);
  if (hot.size)
    parts.push(
      `${(median(hot.get(dl).rates) / median(hot.get(name).rates)).toFixed(1)}× the hand-offs/s`,
    );
  console.log(`dlock-client against ${name}: ${parts.join(', ')}`);
}
if (cpu.size) {
  const [nr, io] = bare.map(([n]) => median(cpu.get(n)));
  console.log(
    `node-redis against ioredis, bare SET+DEL: ${(nr / io).toFixed(2)}× (${(nr - io).toFixed(1)} µs per cycle)`,
  );
}
