// redis-server processes for the tests, on free loopback ports, stopped by PID even when a
// test fails (`after` hooks, and a last sweep when the process exits).
// REDIS_SERVER names the binary (default redis-server on PATH), DLOCK_MODULE the module
// (default target/release/libdlock.so of this repository), as for the Rust and Python tests.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';

// DLOCK_REPO: the repository when this folder is a copy elsewhere (scripts/test-peer.sh).
export const REPO =
  process.env.DLOCK_REPO ?? join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const MODULE = process.env.DLOCK_MODULE ?? join(REPO, 'target', 'release', 'libdlock.so');
const SERVER = process.env.REDIS_SERVER ?? 'redis-server';

const running = new Set();
process.on('exit', () => {
  for (const p of running) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
});

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Server {
  /** `module: false` starts a server without dlock; `args`: more redis-server arguments. */
  static async start({ module = true, args = [] } = {}) {
    if (module && !existsSync(MODULE))
      throw new Error(`${MODULE} missing: run \`cargo build --release -p dlock\``);
    for (let attempt = 0; attempt < 5; attempt++) {
      const s = new Server(await freePort(), module, args);
      if (await s.ready()) return s;
      s.stop();
    }
    throw new Error('redis-server did not start');
  }

  constructor(port, module, args) {
    this.port = port;
    this.dir = mkdtempSync(join(tmpdir(), 'dlock-node-'));
    const argv = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      this.dir,
      '--logfile',
      join(this.dir, 'log'),
      ...args,
    ];
    if (module) argv.push('--loadmodule', MODULE);
    this.proc = spawn(SERVER, argv, { stdio: 'ignore' });
    this.exited = new Promise((r) => this.proc.once('exit', r));
    running.add(this.proc);
  }

  async ready() {
    const until = Date.now() + 10_000;
    while (Date.now() < until) {
      if (this.proc.exitCode !== null) return false;
      const c = createClient({
        socket: { host: '127.0.0.1', port: this.port, reconnectStrategy: false },
      });
      c.on('error', () => {});
      try {
        await c.connect();
        await c.ping();
        c.destroy();
        return true;
      } catch {
        await sleep(20);
      }
    }
    return false;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  get address() {
    return `127.0.0.1:${this.port}`;
  }

  log() {
    try {
      return readFileSync(join(this.dir, 'log'), 'utf8');
    } catch {
      return '';
    }
  }

  /** A plain node-redis client (RESP2, strings) for the test's own checks. */
  async redis() {
    const c = createClient({ url: this.url, RESP: 2 });
    c.on('error', () => {});
    await c.connect();
    return c;
  }

  async stop() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
    running.delete(this.proc);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Poll `fn` until it returns a truthy value (or throw after `ms`): waiting on state, not time. */
export async function until(what, fn, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const SLOTS = 16384;

/** A Redis Cluster of `n` masters with the module, slots split evenly. */
export class Cluster {
  static async start(n = 3) {
    const nodes = [];
    try {
      for (let i = 0; i < n; i++) {
        const bus = await freePort();
        nodes.push(
          await Server.start({
            args: [
              '--cluster-enabled',
              'yes',
              '--cluster-config-file',
              'nodes.conf',
              '--cluster-node-timeout',
              '5000',
              '--cluster-port',
              String(bus),
              '--cluster-announce-ip',
              '127.0.0.1',
            ],
          }),
        );
      }
      const cl = new Cluster(nodes);
      await cl.form();
      return cl;
    } catch (err) {
      await Promise.all(nodes.map((s) => s.stop()));
      throw err;
    }
  }

  constructor(nodes) {
    this.nodes = nodes;
  }

  async cmd(i, args) {
    const c = await this.nodes[i].redis();
    try {
      return await c.sendCommand(args);
    } finally {
      c.destroy();
    }
  }

  async form() {
    const n = this.nodes.length;
    const per = Math.floor(SLOTS / n);
    for (let i = 0; i < n; i++) {
      await this.cmd(i, ['CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1)]);
      const lo = i * per;
      const hi = i + 1 === n ? SLOTS - 1 : lo + per - 1;
      await this.cmd(i, ['CLUSTER', 'ADDSLOTSRANGE', String(lo), String(hi)]);
    }
    for (let i = 1; i < n; i++) {
      const bus = (await this.cmd(i, ['CONFIG', 'GET', 'cluster-port']))[1];
      await this.cmd(0, ['CLUSTER', 'MEET', '127.0.0.1', String(this.nodes[i].port), bus]);
    }
    for (let i = 0; i < n; i++) {
      await until(
        'cluster_state:ok',
        async () =>
          String(await this.cmd(i, ['CLUSTER', 'INFO'])).includes('cluster_state:ok') &&
          String(await this.cmd(i, ['CLUSTER', 'NODES']))
            .trim()
            .split('\n').length === n,
        30_000,
      );
    }
  }

  get urls() {
    return this.nodes.map((s) => s.url);
  }

  async slotOf(key) {
    return Number(await this.cmd(0, ['CLUSTER', 'KEYSLOT', key]));
  }

  async ownerOf(slot) {
    for (const [lo, hi, [, port]] of await this.cmd(0, ['CLUSTER', 'SLOTS'])) {
      if (lo <= slot && slot <= hi) return this.nodes.findIndex((s) => s.port === Number(port));
    }
    throw new Error(`slot ${slot} unassigned`);
  }

  async nodeId(i) {
    return String(await this.cmd(i, ['CLUSTER', 'MYID']));
  }

  /**
   * A live migration of `slot` from node `from` to `to`: IMPORTING/MIGRATING, MIGRATE the keys,
   * SETSLOT NODE.
   */
  async moveSlot(slot, from, to) {
    const [fromId, toId] = [await this.nodeId(from), await this.nodeId(to)];
    await this.cmd(to, ['CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId]);
    await this.cmd(from, ['CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId]);
    for (;;) {
      const keys = await this.cmd(from, ['CLUSTER', 'GETKEYSINSLOT', String(slot), '100']);
      if (keys.length === 0) break;
      await this.cmd(from, [
        'MIGRATE',
        '127.0.0.1',
        String(this.nodes[to].port),
        '',
        '0',
        '5000',
        'KEYS',
        ...keys,
      ]);
    }
    await this.cmd(to, ['CLUSTER', 'SETSLOT', String(slot), 'NODE', toId]);
    for (let i = 0; i < this.nodes.length; i++)
      if (i !== to) await this.cmd(i, ['CLUSTER', 'SETSLOT', String(slot), 'NODE', toId]);
  }

  async stop() {
    await Promise.all(this.nodes.map((s) => s.stop()));
  }
}
