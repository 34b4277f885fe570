/**
 * The client: locks, read-write locks and semaphores on one Redis deployment, and the one
 * watchdog that renews every hold the client has.
 */
import { createClient, createCluster, createSentinel } from 'redis';
import { Attempt, Backend, Grant, Native, Script, probeModule } from './backend.js';
import { now } from './clock.js';
import {
  AcquireTimeoutError,
  ConfigError,
  DlockError,
  LostError,
  LostReason,
  ModuleNotLoadedError,
  NotSupportedError,
  replyText,
  translate,
} from './errors.js';
import { Binding, Entry, Held, HoldOwner } from './hold.js';
import { addressOf, type Link, type NodeRedisClient } from './link.js';
import {
  Kind,
  LockInfo,
  MODULE_BIND_MS,
  Request,
  Waiter,
  checkBind,
  makeRequest,
  newOwnerPrefix,
  parseInfo,
  parseWaiters,
  renewCommand,
  waitArg,
} from './protocol.js';
import { Cluster, NodeRedisCluster, NodeRedisSentinel, Sentinel, Standalone, Topology } from './topology.js';

export interface ClientOptions {
  /**
   * BIND grace (ms): when this process dies (its connections close), the server frees its
   * holds this long after, instead of at the end of their lease. `null`: no BIND. Default 2000.
   */
  bind?: number | null;
  /** `auto` (default): the module's commands when the server has them, else Lua scripts. */
  backend?: 'auto' | 'native' | 'script';
  /** The script backend's unlock channel prefix (Redisson's default). */
  channelPrefix?: string;
}

export interface LockOptions {
  /** Lease in ms (default 30 000); the watchdog renews it every third of it. */
  lease?: number;
  /** Grants carry a fencing token (`held.token`). */
  fence?: boolean;
  /** After a hold ends without a release, nobody gets the lock for this long (ms, <= 60 000). */
  lockDelay?: number;
}

export interface AcquireOptions {
  /** How long to wait (ms): undefined = no limit, 0 = do not wait. */
  timeout?: number;
  /** Aborting it rejects the acquire (with the signal's reason) and leaves nothing held or queued. */
  signal?: AbortSignal;
  /** Acquire as this owner (reentrancy): `client.newOwner()` or a held lock's `owner`. */
  owner?: string;
}

export interface SemaphoreOptions {
  capacity: number;
  lease?: number;
}

export interface SemaphoreAcquireOptions extends AcquireOptions {
  /** Permits to take (default 1). */
  count?: number;
}

const DEFAULT_LEASE_MS = 30_000;
/** The module's own default grace: sent as a bare `BIND`, which costs the server least. */
const DEFAULT_BIND_MS = MODULE_BIND_MS;
/**
 * node-redis 6 gives every command a 5 s `timeout` by default (5.0 had no such option): an AbortSignal.timeout and
 * its listener per command, about half the client CPU of an uncontended acquire + release.
 * That timeout only covers the time a command waits in node-redis's write queue (it is removed
 * once the command is written, so it never bounds a reply), and the connections this package
 * makes do not queue (`disableOfflineQueue`): `connect()` turns it off (0 = none). Clients you
 * hand over, and the cluster's node clients, keep node-redis's setting.
 */
const NO_QUEUE_TIMEOUT = { timeout: 0 };
/** `createClient`'s options; typed loosely since node-redis 5.0's command options had no `timeout` (it ignores it). */
type ClientConfig = Parameters<typeof createClient>[0];
/** `acquire()` without options (one object for all: never written to). */
const NO_OPTIONS: AcquireOptions = Object.freeze({});

export class Lock {
  /** @internal */
  constructor(private readonly client: Client, /** @internal */ readonly request: Request) {}

  get name(): string {
    return this.request.key;
  }

  /** Take the lock: the hold, or null when the wait ran out (or, with `timeout: 0`, it is taken). */
  acquire(opts: AcquireOptions = NO_OPTIONS): Promise<Held | null> {
    return this.client.acquireRequest(this.request, opts);
  }
}

export class ReadWriteLock {
  /** @internal */
  constructor(private readonly client: Client, private readonly name: string, private readonly opts: LockOptions) {}
  read(): Lock {
    const { lockDelay: _ignored, ...rest } = this.opts;
    return new Lock(this.client, makeRequest('read', this.name, { ...rest, lease: rest.lease ?? DEFAULT_LEASE_MS }));
  }
  write(): Lock {
    return new Lock(this.client, makeRequest('write', this.name, { ...this.opts, lease: this.opts.lease ?? DEFAULT_LEASE_MS }));
  }
}

export class Semaphore {
  /** @internal */
  constructor(private readonly client: Client, private readonly request: Request) {}
  get name(): string {
    return this.request.key;
  }
  /** Take `count` permits (default 1), waiting in the server's FIFO queue. */
  acquire(opts: SemaphoreAcquireOptions = {}): Promise<Held | null> {
    const { count, ...rest } = opts;
    const req = count === undefined ? this.request : makeRequest('semaphore', this.request.key, { ...this.request, lease: this.request.leaseMs, count });
    return this.client.acquireRequest(req, rest);
  }
}

type Redis = NodeRedisClient | NodeRedisCluster | NodeRedisSentinel;

/**
 * A node-redis cluster client older than 6.1 has no `getNodeClientForKey` (the key's node
 * client, which waits and BIND need): refused with the version to use. Standalone and
 * Sentinel work from node-redis 5.0 (README, "Requirements").
 */
function checkClusterClient(redis: unknown): void {
  const r = redis as Record<string, unknown>;
  if ('nodeByAddress' in r && typeof r['getNodeClientForKey'] !== 'function') {
    throw new ConfigError('Redis Cluster needs node-redis (redis) 6.1 or later: this cluster client has no getNodeClientForKey()');
  }
}

export class Client implements HoldOwner {
  readonly topo: Topology;
  private readonly wanted: 'auto' | 'native' | 'script';
  private readonly wantedBind: number | null;
  private readonly channelPrefix: string | undefined;
  private backendP: Promise<Backend> | null = null;
  private backend: Backend | null = null;
  private readonly prefix = newOwnerPrefix();
  private owners = 0;
  private readonly entries = new Map<string, Entry>();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private readonly lastPing = new Map<Link, number>();
  private closed = false;
  /** @internal whether close() closes the node-redis client too */
  owned = false;

  /**
   * A client on a node-redis client (`createClient`), cluster (`createCluster`) or Sentinel
   * (`createSentinel`) that you created; `close()` leaves it open.
   */
  constructor(redis: Redis, opts: ClientOptions = {}) {
    this.wanted = opts.backend ?? 'auto';
    if (!['auto', 'native', 'script'].includes(this.wanted)) throw new ConfigError(`backend must be auto, native or script, got ${this.wanted}`);
    this.wantedBind = checkBind(opts.bind === undefined ? DEFAULT_BIND_MS : opts.bind);
    this.channelPrefix = opts.channelPrefix;
    const r = redis as unknown as Record<string, unknown>;
    checkClusterClient(redis);
    if (typeof r['getNodeClientForKey'] === 'function') this.topo = new Cluster(redis as NodeRedisCluster);
    else if (typeof r['getMasterNode'] === 'function') {
      const s = redis as NodeRedisSentinel;
      this.topo = new Sentinel(s, String(s.options?.name ?? '?'));
    } else this.topo = new Standalone(redis as NodeRedisClient);
  }

  /** Connect to one server (`redis://host:port/db`) and make a client that owns the connection. */
  static async connect(url: string, opts: ClientOptions = {}): Promise<Client> {
    // Reconnects after a drop; while disconnected, commands fail at once instead of queueing
    // (a queued RELEASE re-sent later, or a renewal answered too late, helps nobody).
    // The first connection fails connect() at once; a dropped one is made again (up to 0.5 s
    // apart) as node-redis does by default.
    let ready = false;
    const reconnectStrategy = (retries: number, cause: Error): number | Error => (ready ? Math.min(retries * 50, 500) : cause);
    const config = { url, disableOfflineQueue: true, commandOptions: NO_QUEUE_TIMEOUT, socket: { reconnectStrategy } };
    const redis = createClient(config as unknown as ClientConfig) as unknown as NodeRedisClient;
    redis.on('ready', () => (ready = true));
    redis.on('error', () => {}); // surfaces as the failing command's error
    try {
      await redis.connect();
    } catch (err) {
      throw translate(err, addressOf(redis));
    }
    return Client.owning(redis, opts);
  }

  /** Connect to a Redis Cluster through any of its nodes (`redis://host:port` each). */
  static async connectCluster(rootNodes: string[], opts: ClientOptions = {}): Promise<Client> {
    const cluster = createCluster({ rootNodes: rootNodes.map((url) => ({ url })), defaults: { disableOfflineQueue: true } }) as unknown as NodeRedisCluster;
    checkClusterClient(cluster); // before connecting: nothing to close
    cluster.on('error', () => {});
    await cluster.connect();
    return Client.owning(cluster, opts);
  }

  /** Connect to the master a Sentinel service names (`sentinels`: `host:port` each). */
  static async connectSentinel(sentinels: string[], service: string, opts: ClientOptions = {}): Promise<Client> {
    const sentinelRootNodes = sentinels.map((s) => {
      const at = s.lastIndexOf(':');
      return { host: s.slice(0, at), port: Number(s.slice(at + 1)) };
    });
    const sentinel = createSentinel({ name: service, sentinelRootNodes }) as unknown as NodeRedisSentinel;
    sentinel.on('error', () => {});
    await sentinel.connect();
    return Client.owning(sentinel, opts);
  }

  private static async owning(redis: Redis, opts: ClientOptions): Promise<Client> {
    const c = new Client(redis, opts);
    c.owned = true;
    try {
      await c.ready();
    } catch (err) {
      await c.close();
      throw err;
    }
    return c;
  }

  /** Where this client's commands go, as errors name it. */
  get server(): string {
    return this.topo.name;
  }

  /** Whether the module's commands are used (false: the Lua script backend). Known after `ready()`. */
  get native(): boolean | undefined {
    return this.backend?.native;
  }

  /**
   * The BIND grace (ms) holds are bound with; null when `bind: null`, on the script backend,
   * or when the server's module is older than BIND. Known after `ready()`.
   */
  get bind(): number | null | undefined {
    return this.backend?.bindMs;
  }

  /** Pick the backend (asks the server once); every operation does this by itself. */
  async ready(): Promise<void> {
    if (this.backend) return;
    this.backendP ??= this.detect().catch((err) => {
      this.backendP = null;
      throw err;
    });
    this.backend = await this.backendP;
  }

  private async detect(): Promise<Backend> {
    await this.topo.prepare();
    if (this.wanted === 'script') return new Script(this.channelPrefix);
    const probe = await probeModule(this.topo, this.newOwner());
    // A module older than BIND: holds are not bound (they last their lease after a crash).
    if (probe.module) return new Native(probe.bind ? this.wantedBind : null);
    if (this.wanted === 'native') throw new ModuleNotLoadedError(`dlock module not loaded on ${probe.server}`, probe.server);
    return new Script(this.channelPrefix);
  }

  /** A new owner id, different from every other of this client (for `owner:`). */
  newOwner(): string {
    this.owners += 1;
    return `${this.prefix}:${this.owners}`;
  }

  lock(name: string, opts: LockOptions = {}): Lock {
    return new Lock(this, makeRequest('lock', name, { ...opts, lease: opts.lease ?? DEFAULT_LEASE_MS }));
  }

  rwlock(name: string, opts: LockOptions = {}): ReadWriteLock {
    makeRequest('write', name, { ...opts, lease: opts.lease ?? DEFAULT_LEASE_MS }); // checks the options now
    return new ReadWriteLock(this, name, opts);
  }

  semaphore(name: string, opts: SemaphoreOptions): Semaphore {
    return new Semaphore(this, makeRequest('semaphore', name, { ...opts, lease: opts.lease ?? DEFAULT_LEASE_MS }));
  }

  /**
   * Run `fn` holding the lock `name`; released afterwards, whatever `fn` does. Rejects with
   * {@link AcquireTimeoutError} when not granted within `timeout`, and with a
   * {@link LostError} when `fn` returned but the hold was lost meanwhile.
   */
  async using<T>(name: string, opts: LockOptions & AcquireOptions, fn: (held: Held) => Promise<T> | T): Promise<T> {
    const { timeout, signal, owner, ...lockOpts } = opts;
    const acq: AcquireOptions = {};
    if (timeout !== undefined) acq.timeout = timeout;
    if (signal !== undefined) acq.signal = signal;
    if (owner !== undefined) acq.owner = owner;
    const held = await this.lock(name, lockOpts).acquire(acq);
    if (!held) throw new AcquireTimeoutError(`lock ${JSON.stringify(name)} not granted within ${timeout} ms on ${this.server}`, this.server);
    let result: T;
    try {
      result = await fn(held);
    } catch (err) {
      await held.release().catch(() => {});
      throw err;
    }
    await held.release();
    return result;
  }

  /** The clients waiting on `name`, in FIFO order (native backend). */
  async waiters(name: string, count?: number): Promise<Waiter[]> {
    await this.requireNative('waiters()');
    const args = ['DLOCK.WAITERS', name, ...(count === undefined ? [] : ['COUNT', String(count)])];
    return parseWaiters((await this.call(name, args)).reply);
  }

  /** `DLOCK.INFO name`: kind, holders, waiters, fencing token, lock-delay (native backend). */
  async info(name: string): Promise<LockInfo> {
    await this.requireNative('info()');
    return parseInfo((await this.call(name, ['DLOCK.INFO', name])).reply);
  }

  /** Stop the watchdog and close this client's connections. Releases nothing: holds lapse. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    for (const e of [...this.entries.values()]) this.loseEntry(e, 'client-closed');
    this.topo.closePools();
    await this.topo.closeShared(this.owned);
  }

  private async requireNative(what: string): Promise<void> {
    await this.ready();
    if (!this.backend!.native) throw new NotSupportedError(`${what} needs the dlock module (${this.server} uses the script backend)`, this.server);
  }

  private async call(key: string, args: string[]) {
    try {
      return await this.topo.send(key, args);
    } catch (err) {
      throw translate(err, this.server);
    }
  }

  // ----- acquiring -------------------------------------------------------------------------

  /** @internal */
  async acquireRequest(req: Request, opts: AcquireOptions): Promise<Held | null> {
    const { signal } = opts;
    signal?.throwIfAborted();
    if (this.closed) throw new DlockError(`client of ${this.server} is closed`, this.server);
    const wait = waitArg(opts.timeout);
    const start = now();
    // A fresh owner (no `owner` option) holds nothing yet: no look-up of what it holds.
    const fresh = opts.owner === undefined;
    const owner = fresh ? this.newOwner() : opts.owner!;
    const id = this.entryKey(req.key, owner, req.kind);
    try {
      if (!this.backend) await this.ready(); // known after the first: no await per acquire
      const backend = this.backend!;
      if (!backend.native && req.fence) throw new NotSupportedError(`fencing tokens need the dlock module (${this.server} has none)`, this.server);
      if (!backend.native && req.lockDelayMs !== undefined) throw new NotSupportedError(`lockDelay needs the dlock module (${this.server} has none)`, this.server);
      const deadline = wait === undefined ? start : wait === 0 ? Infinity : start + wait;
      for (let at = start; ; at = now()) {
        const attempt: Attempt = { topo: this.topo, req, owner, before: fresh ? 0 : this.heldCount(id), start: at, deadline, wait: wait !== undefined, signal };
        const grant = await backend.acquire(attempt);
        if (!grant) return null;
        if (grant.waited && !(await this.confirm(req, owner, grant, backend))) {
          if (now() < deadline) continue; // lost between grant and confirmation: wait again
          return null;
        }
        return this.register(id, req, owner, grant, backend, fresh);
      }
    } catch (err) {
      if (signal?.aborted && err === signal.reason) throw err;
      throw translate(err, this.server);
    }
  }

  /**
   * A grant from the server's queue started its lease at some moment during the wait (the
   * contract's rule 2, docs/CLIENTS.md): counted from the wait's send time, less than half of
   * it may be left, and with BIND it is bound to the dedicated wait connection, which goes
   * back to the pool (where it may be closed). Renew it now (with BIND, on the shared
   * connection) so it is never handed out already lost, then count its lease from this
   * renewal. Without BIND, a grant with half its lease left is returned as it is.
   */
  private async confirm(req: Request, owner: string, grant: Grant, backend: Backend): Promise<boolean> {
    if (backend.bindMs === null && now() < grant.sentAt + req.leaseMs / 2) return true;
    const sent = await this.topo.send(req.key, renewCommand(req.key, owner, req.leaseMs, backend.bindMs)).catch(async (err) => {
      await backend.release(this.topo, req.key, owner, req.kind, req.count, req.leaseMs).catch(() => {});
      throw err;
    });
    if (Number(sent.reply) !== 1) return false;
    grant.sentAt = sent.sentAt;
    grant.link = backend.bindMs === null ? null : sent.link;
    grant.epoch = sent.epoch;
    return true;
  }

  private entryKey(key: string, owner: string, kind: Kind): string {
    return `${kind}\0${owner}\0${key}`;
  }

  /** What the entry `id` (kind, owner, key) holds by this client's count (holds, or permits). */
  private heldCount(id: string): number {
    const e = this.entries.get(id);
    if (!e || e.gone) return 0;
    let n = 0;
    for (const h of e.holds) n += h.permits;
    return n;
  }

  private register(id: string, req: Request, owner: string, grant: Grant, backend: Backend, fresh: boolean): Held {
    let e = fresh ? undefined : this.entries.get(id);
    if (e) {
      this.checkDeadline(e);
      e = this.entries.get(id);
    }
    const bound: Binding | null =
      grant.link && backend.bindMs !== null ? { link: grant.link, epoch: grant.epoch, graceMs: Math.min(backend.bindMs, req.leaseMs) } : null;
    if (!e) {
      e = new Entry(id, req.key, owner, req.kind, req.leaseMs, 0, bound);
      this.entries.set(id, e);
    }
    e.set(grant.sentAt, req.leaseMs, bound);
    const held = new Held(this, e, grant.count, grant.token, req.kind === 'semaphore' ? req.count : 1, grant.server);
    e.holds.push(held);
    this.schedule(e);
    return held;
  }

  // ----- holds -----------------------------------------------------------------------------

  /** @internal */
  checkDeadline(e: Entry): void {
    if (e.gone || now() < e.deadlineAt()) return;
    this.loseEntry(e, e.deadline().reason);
  }

  private loseEntry(e: Entry, reason: LostReason, cause?: unknown): void {
    e.gone = true;
    if (this.entries.get(e.id) === e) this.entries.delete(e.id);
    for (const h of e.holds) h.lose(reason, cause);
  }

  /** @internal */
  async releaseHold(h: Held): Promise<boolean> {
    if (h.released) throw new LostError(h.key, 'released', h.server);
    h.released = true;
    const e = h.entry;
    e.drop(h);
    if (e.holds.length === 0 && !e.gone) {
      // Out of the watchdog before the RELEASE is sent: a renewal answering 0 after it is
      // not a loss (the race of node-redlock #205).
      e.gone = true;
      if (this.entries.get(e.id) === e) this.entries.delete(e.id);
    }
    let reply: unknown;
    try {
      reply = (await this.backend!.release(this.topo, h.key, h.owner, h.kind, h.permits, e.leaseMs)).reply;
    } catch (err) {
      throw translate(err, h.server);
    }
    if (reply === null || reply === undefined) {
      h.released = false; // it was not ours to release: lost, not released
      h.lose('not-held');
      h.released = true;
      throw new LostError(h.key, 'not-held', h.server);
    }
    return Number(reply) === 1;
  }

  /** @internal */
  async renewHold(h: Held): Promise<boolean> {
    if (h.released) throw new LostError(h.key, 'released', h.server);
    if (h.isLost) throw h.lost.reason as LostError;
    const e = h.entry;
    let sent;
    try {
      sent = await this.backend!.renew(this.topo, e);
    } catch (err) {
      throw translate(err, h.server);
    }
    if (!this.renewed(e, sent)) throw new LostError(h.key, 'not-held', h.server);
    return true;
  }

  private renewed(e: Entry, sent: { reply: unknown; sentAt: number; link: Link; epoch: number }): boolean {
    if (e.gone) return false;
    if (Number(sent.reply) !== 1) {
      this.loseEntry(e, 'not-held');
      return false;
    }
    const b = this.backend!.bindMs;
    e.set(sent.sentAt, e.leaseMs, b === null ? undefined : { link: sent.link, epoch: sent.epoch, graceMs: Math.min(b, e.leaseMs) });
    return true;
  }

  // ----- the watchdog ----------------------------------------------------------------------

  /** How often a bound connection gets its sign of life (a PING), while holds are bound to it. */
  private pingEvery(graceMs: number): number {
    return Math.max(20, Math.min(1000, graceMs / 4));
  }

  /** Wake the watchdog by the time `e` needs it (or reschedule for every entry). */
  private schedule(e?: Entry): void {
    if (this.closed) return;
    let at = Infinity;
    if (e) at = this.wakeFor(e);
    else for (const x of this.entries.values()) at = Math.min(at, this.wakeFor(x));
    if (at === Infinity || (this.timer && at >= this.timerAt)) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => this.tick(), Math.max(0, at - now()));
    this.timer.unref();
  }

  /** When the watchdog must look at `e`: its renewal, its deadline, its connection's ping. */
  private wakeFor(e: Entry): number {
    const at = Math.min(e.nextDue, e.deadlineAt());
    return e.bound ? Math.min(at, (this.lastPing.get(e.bound.link) ?? -Infinity) + this.pingEvery(e.bound.graceMs)) : at;
  }

  private tick(): void {
    this.timer = null;
    this.timerAt = Infinity;
    const t = now();
    const pings = new Map<Link, number>();
    for (const e of [...this.entries.values()]) {
      if (t >= e.deadlineAt()) {
        this.loseEntry(e, e.deadline().reason);
        continue;
      }
      // A bound connection that closed since: renew now, which rebinds the hold to the
      // connection that answers.
      const rebind = e.bound !== null && e.bound.link.currentEpoch !== e.bound.epoch;
      if (!e.renewing && (e.nextDue <= t || rebind)) this.renewEntry(e);
      if (e.bound) pings.set(e.bound.link, Math.min(pings.get(e.bound.link) ?? Infinity, this.pingEvery(e.bound.graceMs)));
    }
    for (const [link, every] of pings) {
      if (t - (this.lastPing.get(link) ?? -Infinity) >= every) {
        this.lastPing.set(link, t);
        link.send(['PING']).catch(() => {}); // its answer moves link.knownOpen
      }
    }
    this.schedule();
  }

  /** Renewals of one tick are sent together: node-redis writes them in one batch. */
  private renewEntry(e: Entry): void {
    e.renewing = true;
    this.backend!.renew(this.topo, e)
      .then(
        (sent) => void this.renewed(e, sent),
        (err) => {
          if (e.gone) return;
          if (replyText(err)?.startsWith('WRONGTYPE')) this.loseEntry(e, 'not-held', err);
          else e.nextDue = now() + Math.min(e.leaseMs / 10, 250); // unreachable: try again soon
        },
      )
      .catch(() => {})
      .finally(() => {
        e.renewing = false;
        this.schedule();
      });
  }
}
