/**
 * The client: its options, connecting (the topology is made in topology.ts), the backend
 * (chosen in backend.ts), acquiring, `waiters()` / `info()`, and close. Holds live in
 * {@link Holds}, renewed by its watchdog.
 */
import { Attempt, Backend, BackendChoice, Grant, chooseBackend } from './backend.js';
import { now } from './clock.js';
import {
  AcquireTimeoutError,
  ClosedError,
  ConfigError,
  NotSupportedError,
  ResponseTimeoutError,
  translate,
} from './errors.js';
import type { Held } from './hold.js';
import { Holds } from './holds.js';
import { destroy, within } from './link.js';
import {
  AcquireOptions,
  Lock,
  LockOptions,
  ReadWriteLock,
  Semaphore,
  SemaphoreOptions,
} from './locks.js';
import {
  LEASE_DEFAULT_MS,
  LockInfo,
  MODULE_BIND_MS,
  RESPONSE_TIMEOUT_DEFAULT_MS,
  Request,
  Waiter,
  checkBind,
  checkResponseTimeout,
  makeRequest,
  newOwnerPrefix,
  parseInfo,
  parseWaiters,
  renewCommand,
  waitArg,
} from './protocol.js';
import {
  NodeRedis,
  Topology,
  Unconnected,
  topologyOf,
  unconnectedCluster,
  unconnectedSentinel,
  unconnectedSingle,
} from './topology.js';

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
  /**
   * How long (ms) a command or a connect may go unanswered before it fails with a
   * `ResponseTimeoutError` (a wait: this long after its own time-out). Default 5000.
   */
  responseTimeout?: number;
}

/** The options, checked: what a client is made with. */
interface Settings {
  backend: BackendChoice;
  bind: number | null;
  channelPrefix: string | undefined;
  responseMs: number;
}

/** Refuse bad options before anything is opened (a `ConfigError`). */
function settings(opts: ClientOptions | undefined): Settings {
  const o = opts ?? {};
  if (typeof o !== 'object') throw new ConfigError(`options must be an object, got ${String(o)}`);
  const backend = o.backend ?? 'auto';
  if (!['auto', 'native', 'script'].includes(backend))
    throw new ConfigError(`backend must be auto, native or script, got ${String(backend)}`);
  if (
    o.channelPrefix !== undefined &&
    (typeof o.channelPrefix !== 'string' || o.channelPrefix === '')
  ) {
    throw new ConfigError(
      `channelPrefix must be a non-empty string, got ${String(o.channelPrefix)}`,
    );
  }
  return {
    backend,
    bind: checkBind(o.bind === undefined ? MODULE_BIND_MS : o.bind),
    channelPrefix: o.channelPrefix,
    responseMs: checkResponseTimeout(o.responseTimeout ?? RESPONSE_TIMEOUT_DEFAULT_MS),
  };
}

export class Client {
  readonly #topo: Topology;
  readonly #settings: Settings;
  readonly #holds: Holds;
  #backendP: Promise<Backend> | null = null;
  #backend: Backend | null = null;
  readonly #prefix = newOwnerPrefix();
  #owners = 0;
  /** Aborted by close() (its reason a ClosedError): pending waits end with it. */
  readonly #closing = new AbortController();
  #closed: Promise<void> | null = null;
  /** Whether close() closes the node-redis client too. */
  #owned = false;

  /**
   * A client on a node-redis client (`createClient`), cluster (`createCluster`) or Sentinel
   * (`createSentinel`) that you created; `close()` leaves it open.
   */
  constructor(redis: NodeRedis, opts: ClientOptions = {}) {
    this.#settings = settings(opts);
    this.#topo = topologyOf(redis, this.#settings.responseMs);
    this.#holds = new Holds(this.#topo);
  }

  /**
   * Connect to one server (`redis://host:port/db`) and make a client that owns the connection.
   * Bad options are refused before anything is opened; the whole call (connecting and asking
   * the server for the module) ends within `responseTimeout`.
   */
  static async connect(url: string, opts: ClientOptions = {}): Promise<Client> {
    const s = settings(opts);
    return Client.#owning(unconnectedSingle(url), opts, s);
  }

  /** Connect to a Redis Cluster through any of its nodes (`redis://host:port` each). */
  static async connectCluster(rootNodes: string[], opts: ClientOptions = {}): Promise<Client> {
    const s = settings(opts);
    return Client.#owning(unconnectedCluster(rootNodes), opts, s);
  }

  /** Connect to the master a Sentinel service names (`sentinels`: `host:port` each). */
  static async connectSentinel(
    sentinels: string[],
    service: string,
    opts: ClientOptions = {},
  ): Promise<Client> {
    const s = settings(opts);
    return Client.#owning(unconnectedSentinel(sentinels, service), opts, s);
  }

  /**
   * A client owning `redis`: connected and its backend picked within the response time-out,
   * or everything closed again.
   */
  static async #owning(u: Unconnected, opts: ClientOptions, s: Settings): Promise<Client> {
    const { redis, name } = u;
    let made: Client | null = null;
    const start = async (): Promise<Client> => {
      try {
        await u.connect();
      } catch (err) {
        throw translate(err, name);
      }
      const c = new Client(redis, opts);
      c.#owned = true;
      made = c;
      await c.ready();
      return c;
    };
    const late = (): Error => ResponseTimeoutError.of(name, 'connect', s.responseMs);
    try {
      return await within(start(), s.responseMs, late, () => destroy(redis));
    } catch (err) {
      if (made) await (made as Client).close();
      else destroy(redis);
      throw err;
    }
  }

  /** Where this client's commands go, as errors name it. */
  get server(): string {
    return this.#topo.name;
  }

  /**
   * Whether the module's commands are used (false: the Lua script backend). Known after
   * `ready()`.
   */
  get native(): boolean | undefined {
    return this.#backend?.native;
  }

  /**
   * The BIND grace (ms) holds are bound with; null when `bind: null`, on the script backend,
   * or when the server's module is older than BIND. Known after `ready()`.
   */
  get bind(): number | null | undefined {
    return this.#backend?.bindMs;
  }

  /** How long a command may go unanswered (ms): the `responseTimeout` option. */
  get responseTimeout(): number {
    return this.#settings.responseMs;
  }

  /** Pick the backend (asks the server once); every operation does this by itself. */
  async ready(): Promise<void> {
    this.#throwIfClosed();
    if (this.#backend) return;
    this.#backendP ??= this.#detect().catch((err) => {
      this.#backendP = null;
      throw err;
    });
    try {
      this.#backend = await this.#backendP;
    } catch (err) {
      throw this.#failed(err);
    }
    this.#holds.backend = this.#backend;
  }

  async #detect(): Promise<Backend> {
    await this.#topo.prepare();
    return chooseBackend(this.#topo, this.#settings, this.newOwner());
  }

  /** A new owner id, different from every other of this client (for `owner:`). */
  newOwner(): string {
    this.#owners += 1;
    return `${this.#prefix}:${this.#owners}`;
  }

  lock(name: string, opts: LockOptions = {}): Lock {
    return new Lock(
      this,
      makeRequest('lock', name, { ...opts, lease: opts.lease ?? LEASE_DEFAULT_MS }),
    );
  }

  rwlock(name: string, opts: LockOptions = {}): ReadWriteLock {
    return new ReadWriteLock(this, name, opts);
  }

  /** A semaphore of `capacity` permits (required: a `ConfigError` without it). */
  semaphore(name: string, opts: SemaphoreOptions): Semaphore {
    const o: Partial<SemaphoreOptions> = opts ?? {};
    return new Semaphore(
      this,
      makeRequest('semaphore', name, { ...o, lease: o.lease ?? LEASE_DEFAULT_MS }),
    );
  }

  /**
   * Run `fn` holding the lock `name`; released afterwards, whatever `fn` does. Rejects with
   * {@link AcquireTimeoutError} when not granted within `timeout`, and with a
   * `NotHeldError` when `fn` returned but the hold was lost meanwhile.
   */
  async using<T>(
    name: string,
    opts: LockOptions & AcquireOptions,
    fn: (held: Held) => Promise<T> | T,
  ): Promise<T> {
    const { timeout, signal, owner, ...lockOpts } = opts;
    const acq: AcquireOptions = {};
    if (timeout !== undefined) acq.timeout = timeout;
    if (signal !== undefined) acq.signal = signal;
    if (owner !== undefined) acq.owner = owner;
    const held = await this.lock(name, lockOpts).acquire(acq);
    if (!held)
      throw new AcquireTimeoutError(
        `lock ${JSON.stringify(name)} not granted within ${timeout} ms on ${this.server}`,
        this.server,
      );
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
    await this.#requireNative('waiters()');
    const args = ['DLOCK.WAITERS', name, ...(count === undefined ? [] : ['COUNT', String(count)])];
    return parseWaiters((await this.#call(name, args)).reply);
  }

  /** `DLOCK.INFO name`: kind, holders, waiters, fencing token, lock-delay (native backend). */
  async info(name: string): Promise<LockInfo> {
    await this.#requireNative('info()');
    return parseInfo((await this.#call(name, ['DLOCK.INFO', name])).reply);
  }

  /**
   * Stop the watchdog and close every connection and timer this client opened (the
   * node-redis client too when `Client.connect*` made it), at once: nothing is sent, so a
   * hung server cannot delay it. Releases nothing: holds lapse (their `lost` aborts with
   * reason `closed`). Pending acquires and commands reject with a `ClosedError`, and so does
   * every call after.
   */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      const closed = (): ClosedError =>
        new ClosedError(`client of ${this.server} is closed`, this.server);
      this.#closing.abort(closed());
      this.#holds.close(closed);
      this.#topo.close(this.#owned, closed());
    })();
    return this.#closed;
  }

  #throwIfClosed(): void {
    if (this.#closing.signal.aborted) throw this.#closing.signal.reason;
  }

  /** A failed call's error: `ClosedError` once the client is closed, else the package's. */
  #failed(err: unknown): Error {
    return this.#closing.signal.aborted
      ? (this.#closing.signal.reason as Error)
      : translate(err, this.server);
  }

  async #requireNative(what: string): Promise<void> {
    await this.ready();
    if (!this.#backend!.native)
      throw new NotSupportedError(
        `${what} needs the dlock module (${this.server} uses the script backend)`,
        this.server,
      );
  }

  async #call(key: string, args: string[]) {
    try {
      return await this.#topo.send(key, args);
    } catch (err) {
      throw this.#failed(err);
    }
  }

  // ----- acquiring -------------------------------------------------------------------------

  /** @internal */
  async acquireRequest(req: Request, opts: AcquireOptions): Promise<Held | null> {
    const { signal } = opts;
    signal?.throwIfAborted();
    this.#throwIfClosed();
    const wait = waitArg(opts.timeout);
    const start = now();
    // A fresh owner (no `owner` option) holds nothing yet: no look-up of what it holds.
    const fresh = opts.owner === undefined;
    const owner = fresh ? this.newOwner() : opts.owner!;
    const id = Holds.entryKey(req.key, owner, req.kind);
    try {
      if (!this.#backend) await this.ready(); // known after the first: no await per acquire
      const backend = this.#backend!;
      if (!backend.native && req.fence)
        throw new NotSupportedError(
          `fencing tokens need the dlock module (${this.server} has none)`,
          this.server,
        );
      if (!backend.native && req.lockDelayMs !== undefined)
        throw new NotSupportedError(
          `lockDelay needs the dlock module (${this.server} has none)`,
          this.server,
        );
      const deadline = wait === undefined ? start : wait === 0 ? Infinity : start + wait;
      const closed = this.#closing.signal;
      for (let at = start; ; at = now()) {
        const before = fresh ? 0 : this.#holds.heldCount(id);
        const attempt: Attempt = {
          topo: this.#topo,
          req,
          owner,
          before,
          start: at,
          deadline,
          wait: wait !== undefined,
          signal,
          closed,
        };
        const grant = await backend.acquire(attempt);
        // A wait without limit is never answered "not granted"; should it be, it waits on.
        if (!grant) {
          if (deadline === Infinity) continue;
          return null;
        }
        if (grant.waited && !(await this.#confirm(req, owner, grant, backend))) {
          if (now() < deadline) continue; // lost between grant and confirmation: wait again
          return null;
        }
        this.#throwIfClosed();
        return this.#holds.register(id, req, owner, grant, fresh);
      }
    } catch (err) {
      if (signal?.aborted && err === signal.reason) throw err;
      throw this.#failed(err);
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
  async #confirm(req: Request, owner: string, grant: Grant, backend: Backend): Promise<boolean> {
    if (backend.bindMs === null && now() < grant.sentAt + req.leaseMs / 2) return true;
    const sent = await this.#topo
      .send(req.key, renewCommand(req.key, owner, req.leaseMs, backend.bindMs))
      .catch((err) => {
        // Given back without waiting: the call ends within its bound even when the server hangs.
        const r = { key: req.key, owner, kind: req.kind, count: req.count, leaseMs: req.leaseMs };
        backend.release(this.#topo, r).catch(() => {});
        throw err;
      });
    if (Number(sent.reply) !== 1) return false;
    grant.sentAt = sent.sentAt;
    grant.link = backend.bindMs === null ? null : sent.link;
    grant.epoch = sent.epoch;
    return true;
  }
}
