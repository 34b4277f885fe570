#!/usr/bin/env node
// dlock-client against redlock and redis-semaphore on one redis-server (with the module; the
// other two use plain keys and Lua there), in one run:
//   - client CPU per uncontended acquire + release (process.cpuUsage over sequential cycles;
//     the libraries take turns, ROUNDS rounds of CYCLES/ROUNDS cycles each, and each one's figure
//     is the median of its rounds, so a burst of load on this shared machine does not land on
//     one library's whole measurement),
//   - hand-offs per second on one hot lock with 4 contenders (each: acquire, release, again),
//   - p99 of the wait of those contended acquires.
// Each library runs with its own defaults, except that no acquire gives up (redlock:
// retryCount -1; redis-semaphore: acquireTimeout 60 s). Usage: node bench/bench.mjs [--seconds S]
import Redis from 'ioredis';
import Redlock from 'redlock';
import { Mutex } from 'redis-semaphore';
import { Client } from 'dlock-client';
import { Server } from '../test/servers.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i < 0 ? dflt : Number(process.argv[i + 1]);
};
const SECONDS = arg('--seconds', 3);
const CYCLES = arg('--cycles', 3000);
const CONTENDERS = 4;
const LEASE = 10_000;

function cpuPerCycle(before, cycles) {
  const d = process.cpuUsage(before);
  return (d.user + d.system) / cycles;
}

function p99(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] ?? NaN;
}

const ROUNDS = 5;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/**
 * Uncontended CPU per cycle of each library (`makers`: name -> make), in turns: after a
 * warm-up of each, ROUNDS rounds in which every library runs CYCLES/ROUNDS sequential cycles.
 */
async function uncontended(makers) {
  const solos = [];
  for (const [name, make] of makers) {
    const solo = await make('solo');
    for (let i = 0; i < 300; i++) await solo.cycle(); // warm-up (connections, scripts, JIT)
    solos.push({ name, solo, cpus: [] });
  }
  const per = Math.max(1, Math.round(CYCLES / ROUNDS));
  for (let r = 0; r < ROUNDS; r++) {
    for (const s of solos) {
      const before = process.cpuUsage();
      for (let i = 0; i < per; i++) await s.solo.cycle();
      s.cpus.push(cpuPerCycle(before, per));
    }
  }
  for (const s of solos) await s.solo.close();
  return new Map(solos.map((s) => [s.name, median(s.cpus)]));
}

/** The contended figures of one library (`make()` returns a contender: { cycle(), close() }), with its uncontended `cpu`. */
async function measure(name, make, cpu) {
  // Contended: 4 contenders on one hot lock.
  const cs = await Promise.all(Array.from({ length: CONTENDERS }, () => make('hot')));
  const waits = [];
  let handoffs = 0;
  let holder = -1;
  const end = performance.now() + SECONDS * 1000;
  const start = performance.now();
  await Promise.all(
    cs.map(async (c, me) => {
      while (performance.now() < end) {
        await c.cycle((waited) => {
          waits.push(waited);
          // A hand-off: the lock went to another contender (a contender re-taking the
          // lock it just released is not one).
          if (holder !== me) handoffs++;
          holder = me;
        });
      }
    }),
  );
  const rate = handoffs / ((performance.now() - start) / 1000);
  await Promise.all(cs.map((c) => c.close()));
  return { name, cpu, rate, p99: p99(waits) };
}

const server = await Server.start();
/** Each library as `make(key)`: a contender on `key` ({ cycle(onGranted?), close() }). */
const makers = [
  [
    'dlock-client',
    async (key) => {
      const c = await Client.connect(server.url);
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
    },
  ],
  [
    'redlock 4.2 (ioredis)',
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
    'redis-semaphore 5.8 Mutex (ioredis)',
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
const rows = [];
try {
  const cpu = await uncontended(makers);
  for (const [name, make] of makers) rows.push(await measure(name, make, cpu.get(name)));
} finally {
  await server.stop();
}

const dl = rows[0];
console.log(`Node clients on one redis-server (${CYCLES} uncontended cycles in ${ROUNDS} interleaved rounds, median; ${CONTENDERS} contenders for ${SECONDS} s), ${new Date().toISOString().slice(0, 10)}`);
console.log('| client | client CPU per acquire+release | hand-offs/s (4 contenders) | p99 wait |');
console.log('|---|---|---|---|');
for (const r of rows) console.log(`| ${r.name} | ${r.cpu.toFixed(1)} µs | ${r.rate.toFixed(0)} | ${r.p99.toFixed(1)} ms |`);
console.log('');
for (const r of rows.slice(1)) {
  console.log(`dlock-client against ${r.name}: ${(dl.cpu / r.cpu).toFixed(2)}× the CPU per cycle, ${(dl.rate / r.rate).toFixed(1)}× the hand-offs/s`);
}
