/**
 * Where a key's commands go (the topology): one server (single), the key's master (cluster:
 * following MOVED / ASK / TRYAGAIN), or the master a Sentinel service names. Each server
 * connection is a {@link Link}; each has its own pool of dedicated connections for waits.
 * Also the node-redis clients `Client.connect*` make, and which topology a handed-over
 * node-redis client is.
 */
import { createClient, createCluster, createSentinel } from 'redis';
import { now } from './clock.js';
import { ConfigError, RedirectError, ResponseTimeoutError, replyText, serverOf } from './errors.js';
import { Link, Loose, NodeRedisClient, Sent, addressOf, destroy, within } from './link.js';
import { WaitPool } from './pool.js';
import { redirectOf } from './protocol.js';

/** What this package needs of a node-redis cluster (`createCluster()`). */
export interface NodeRedisCluster {
  sendCommand(
    firstKey: string | undefined,
    isReadonly: boolean | undefined,
    args: string[],
    options?: Loose,
  ): Promise<unknown>;
  getNodeClientForKey(key: string, isReadonly?: boolean): Promise<NodeRedisClient>;
  readonly nodeByAddress: Map<string, Loose>;
  nodeClient(node: Loose): Promise<NodeRedisClient>;
  readonly masters: Loose[];
  readonly isOpen?: boolean;
  connect(): Promise<unknown>;
  close?(): Promise<void>;
  destroy?(): void;
  on(event: string, listener: (...args: Loose[]) => void): unknown;
  subscribe?(channel: string, listener: (...args: Loose[]) => void): Promise<unknown>;
  unsubscribe?(channel?: string, listener?: (...args: Loose[]) => void): Promise<unknown>;
}

/** What this package needs of a node-redis Sentinel client (`createSentinel()`). */
export interface NodeRedisSentinel {
  getMasterNode(): { host: string; port: number } | undefined;
  readonly options?: Loose;
  readonly isOpen?: boolean;
  connect(): Promise<unknown>;
  close?(): Promise<void>;
  destroy?(): void;
  on(event: string, listener: (...args: Loose[]) => void): unknown;
}

/** The most redirects one command follows (a slot moving twice under it is already rare). */
const MAX_REDIRECTS = 8;
const TRYAGAIN_PAUSE_MS = 25;

export const sleep = (ms: number): Promise<void> =>
  new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** A connection that can SUBSCRIBE (the script backend's unlock channel). */
export interface Subscriber {
  subscribe(ch: string, fn: () => void): Promise<unknown>;
  unsubscribe(ch: string, fn: () => void): Promise<unknown>;
}

export abstract class Topology {
  abstract readonly name: string;
  private readonly pools = new Map<Link, WaitPool>();
  /**
   * Connections this package made (Sentinel's master links, subscribers): close() ends them
   * all.
   */
  private readonly own = new Set<NodeRedisClient>();
  private closed = false;

  /** `responseMs`: the client's `responseTimeout`, the bound of every command and connect. */
  constructor(readonly responseMs: number) {}

  /** Connect what the user handed over unconnected. */
  abstract prepare(): Promise<void>;
  /** The shared connection of the server that has `key`. */
  abstract link(key: string): Promise<Link>;
  /** That connection when it is known without asking (single), else null: saves the
   * uncontended path a promise per command. */
  protected linkNow(_key: string): Link | null {
    return null;
  }
  /** The slot map moved `key` (MOVED): learn where to. */
  protected async moved(_key: string): Promise<void> {}
  /** The connection to `address`, for an ASK redirect. */
  protected async askLink(address: string): Promise<Link> {
    throw new RedirectError(`ASK to ${address} outside a cluster`, this.name);
  }
  /** Every link, for the sign-of-life pings and close(). */
  abstract links(): Link[];
  /** A connection that can SUBSCRIBE (the script backend's unlock channel). */
  abstract subscriber(): Promise<Subscriber>;
  /** What the user handed over (destroyed by `close(true)`). */
  protected abstract readonly handed: { destroy?(): unknown };

  pool(link: Link): WaitPool {
    let p = this.pools.get(link);
    if (!p) this.pools.set(link, (p = new WaitPool(link.client, link.name)));
    return p;
  }

  /**
   * A connection of this package's own (made by `make`), connected within the response
   * time-out, and closed by {@link close} whatever happens to it meanwhile.
   */
  protected async connectOwn(make: () => NodeRedisClient, name: string): Promise<NodeRedisClient> {
    if (this.closed) throw new Error('closed');
    const c = make();
    c.on('error', () => {}); // surfaces as the failing command's error
    this.own.add(c);
    try {
      await this.connecting(c, name, () => destroy(c));
    } catch (err) {
      this.own.delete(c);
      destroy(c);
      throw err;
    }
    return c;
  }

  private sub: { client: NodeRedisClient | null; made: Promise<Subscriber> } | null = null;

  /**
   * The one subscriber connection of this topology (made by `make`), shared by every wait:
   * concurrent first waits share the connection being made, and one that closed (a failover)
   * is made again.
   */
  protected ownSubscriber(make: () => NodeRedisClient): Promise<Subscriber> {
    if (this.sub?.client && !this.sub.client.isOpen) this.sub = null;
    if (!this.sub) {
      const s: { client: NodeRedisClient | null; made: Promise<Subscriber> } = {
        client: null,
        made: Promise.resolve(null as never),
      };
      s.made = this.connectOwn(make, this.name).then(
        (c) => {
          s.client = c;
          return this.bounded(c, this.name);
        },
        (err) => {
          if (this.sub === s) this.sub = null;
          throw err;
        },
      );
      this.sub = s;
    }
    return this.sub.made;
  }

  /**
   * `c.connect()` within the response time-out (else `onTimeout`, and a
   * {@link ResponseTimeoutError}).
   */
  protected async connecting(
    c: { connect(): Promise<unknown> },
    name: string,
    onTimeout?: () => void,
  ): Promise<void> {
    await within(
      c.connect(),
      this.responseMs,
      () => ResponseTimeoutError.of(name, 'connect', this.responseMs),
      onTimeout,
    );
  }

  /** `sub`'s SUBSCRIBE and UNSUBSCRIBE, each answered within the response time-out. */
  protected bounded(
    sub: { subscribe?: Subscriber['subscribe']; unsubscribe?: Subscriber['unsubscribe'] },
    name: string,
  ): Subscriber {
    const late = (): Error => ResponseTimeoutError.of(name, 'answer', this.responseMs);
    return {
      subscribe: (ch, fn) => within(sub.subscribe!(ch, fn), this.responseMs, late),
      unsubscribe: (ch, fn) => within(sub.unsubscribe!(ch, fn), this.responseMs, late),
    };
  }

  /**
   * End everything, sending nothing (a hung server cannot delay it): the wait connections
   * (pending waits fail), this package's own connections, the links (commands still
   * unanswered fail with `err`), and, when `owned`, what the user handed over.
   */
  close(owned: boolean, err: Error): void {
    this.closed = true;
    for (const p of this.pools.values()) p.close();
    for (const c of this.own) destroy(c);
    this.own.clear();
    if (owned) destroy(this.handed);
    for (const l of this.links()) l.detach(err);
  }

  /**
   * Run `attempt` on the key's link, following redirects until `deadline` (monotonic ms):
   * MOVED asks the cluster for the new owner, ASK goes to the named node once (`asking`:
   * send ASKING first on the same connection), TRYAGAIN pauses briefly.
   */
  async routed<T>(
    key: string,
    deadline: number,
    attempt: (link: Link, asking: boolean) => Promise<T>,
  ): Promise<T> {
    let link = this.linkNow(key) ?? (await this.link(key));
    let asking = false;
    for (let redirects = 0; ; redirects++) {
      try {
        return await attempt(link, asking);
      } catch (err) {
        const r = redirectOf(replyText(err));
        if (!r) throw err;
        if (redirects >= MAX_REDIRECTS || now() >= deadline) {
          const at = serverOf(err, link.name);
          throw new RedirectError(
            `${at}: ${replyText(err)} (gave up after ${redirects + 1} redirects)`,
            at,
            { cause: err },
          );
        }
        asking = false;
        if (r.kind === 'MOVED') {
          await this.moved(key);
          link = await this.link(key);
        } else if (r.kind === 'ASK') {
          link = await this.askLink(r.address);
          asking = true;
        } else {
          await sleep(Math.min(TRYAGAIN_PAUSE_MS, deadline - now()));
          link = await this.link(key);
        }
      }
    }
  }

  /**
   * A short command on the key's server, redirects followed (within the response time-out).
   * `sentAt`: a moment taken just before (it must not be later than the send), to save reading
   * the clock again.
   */
  send(key: string, args: readonly string[], sentAt?: number): Promise<Sent> {
    // Single: one connection and no redirects, so no routing (the uncontended path).
    const direct = this.linkNow(key);
    if (direct) return direct.send(args, sentAt);
    return this.routed(key, now() + this.responseMs, (link, asking) =>
      sendAsking(link, asking, args),
    );
  }
}

/** `args` on `link`, preceded by ASKING when an ASK redirect said so (both written in order). */
export function sendAsking(link: Link, asking: boolean, args: readonly string[]): Promise<Sent> {
  if (!asking) return link.send(args);
  const ask = link.client.sendCommand(['ASKING']);
  ask.catch(() => {}); // its failure is the command's
  return link.send(args);
}

export class Single extends Topology {
  readonly name: string;
  private readonly shared: Link;
  constructor(client: NodeRedisClient, responseMs: number) {
    super(responseMs);
    this.shared = new Link(client, responseMs);
    this.name = this.shared.name;
  }
  protected get handed(): NodeRedisClient {
    return this.shared.client;
  }
  async prepare(): Promise<void> {
    const c = this.shared.client;
    if (!c.isOpen) await this.connecting(c, this.name);
  }
  async link(): Promise<Link> {
    return this.shared;
  }
  protected override linkNow(): Link {
    return this.shared;
  }
  links(): Link[] {
    return [this.shared];
  }
  subscriber(): Promise<Subscriber> {
    return this.ownSubscriber(() => this.shared.client.duplicate());
  }
}

export class Cluster extends Topology {
  readonly name: string;
  private readonly byClient = new Map<NodeRedisClient, Link>();

  constructor(
    private readonly cluster: NodeRedisCluster,
    responseMs: number,
  ) {
    super(responseMs);
    this.name = 'cluster';
  }
  protected get handed(): NodeRedisCluster {
    return this.cluster;
  }
  private linkOf(client: NodeRedisClient): Link {
    let l = this.byClient.get(client);
    if (!l) this.byClient.set(client, (l = new Link(client, this.responseMs)));
    return l;
  }
  async prepare(): Promise<void> {
    if (this.cluster.isOpen === false) await this.connecting(this.cluster, this.name);
  }
  async link(key: string): Promise<Link> {
    return this.linkOf(await this.cluster.getNodeClientForKey(key, false));
  }
  protected override async moved(key: string): Promise<void> {
    // Any key command through the cluster client gets the same MOVED, which makes
    // node-redis re-read the slot map before answering.
    await this.cluster.sendCommand(key, false, ['PTTL', key]);
  }
  protected override async askLink(address: string): Promise<Link> {
    const node = this.cluster.nodeByAddress.get(address);
    if (!node)
      throw new RedirectError(
        `ASK to ${address}, a node the cluster client does not know`,
        this.name,
      );
    return this.linkOf(await this.cluster.nodeClient(node));
  }
  links(): Link[] {
    return [...this.byClient.values()];
  }
  async subscriber(): Promise<Subscriber> {
    return this.bounded(this.cluster, this.name);
  }
}

/**
 * Sentinel: the `createSentinel()` client finds the master; this package talks to it on a
 * connection of its own (so it sees that connection close, which BIND's rule needs), made
 * again from the Sentinel's answer when it closes (after a failover).
 */
export class Sentinel extends Topology {
  readonly name: string;
  private current: Link | null = null;
  private pending: Promise<Link> | null = null;
  private readonly retired: Link[] = [];

  constructor(
    private readonly sentinel: NodeRedisSentinel,
    service: string,
    responseMs: number,
  ) {
    super(responseMs);
    this.name = `sentinel service ${service}`;
  }
  protected get handed(): NodeRedisSentinel {
    return this.sentinel;
  }
  async prepare(): Promise<void> {
    if (this.sentinel.isOpen === false) await this.connecting(this.sentinel, this.name);
  }
  link(): Promise<Link> {
    if (this.current?.client.isOpen) return Promise.resolve(this.current);
    this.pending ??= this.open().finally(() => (this.pending = null));
    return this.pending;
  }
  private newClient(): NodeRedisClient {
    const master = this.sentinel.getMasterNode();
    if (!master) throw new RedirectError(`${this.name}: no master known`, this.name);
    const base = this.sentinel.options?.nodeClientOptions ?? {};
    return createClient({
      ...base,
      socket: {
        ...(base.socket ?? {}),
        host: master.host,
        port: master.port,
        reconnectStrategy: false,
      },
    }) as unknown as NodeRedisClient;
  }
  private async open(): Promise<Link> {
    if (this.current) this.retired.push(this.current);
    const link = new Link(
      await this.connectOwn(() => this.newClient(), this.name),
      this.responseMs,
    );
    this.current = link;
    return link;
  }
  links(): Link[] {
    return [...this.retired, ...(this.current ? [this.current] : [])];
  }
  subscriber(): Promise<Subscriber> {
    return this.ownSubscriber(() => this.newClient());
  }
}

/** What a client can be made on: a node-redis client, cluster or Sentinel client. */
export type NodeRedis = NodeRedisClient | NodeRedisCluster | NodeRedisSentinel;

/**
 * A node-redis cluster client older than 6.1 has no `getNodeClientForKey` (the key's node
 * client, which waits and BIND need): refused with the version to use. Single servers and
 * Sentinel work from node-redis 5.0 (README, "Requirements").
 */
function checkClusterClient(redis: unknown): void {
  const r = redis as Record<string, unknown>;
  if ('nodeByAddress' in r && typeof r['getNodeClientForKey'] !== 'function') {
    throw new ConfigError(
      'Redis Cluster needs node-redis (redis) 6.1 or later: ' +
        'this cluster client has no getNodeClientForKey()',
    );
  }
}

/** The topology of a node-redis client, cluster or Sentinel client (told by their methods). */
export function topologyOf(redis: NodeRedis, responseMs: number): Topology {
  const r = redis as unknown as Record<string, unknown>;
  checkClusterClient(redis);
  if (typeof r['getNodeClientForKey'] === 'function') {
    return new Cluster(redis as NodeRedisCluster, responseMs);
  }
  if (typeof r['getMasterNode'] === 'function') {
    const sn = redis as NodeRedisSentinel;
    return new Sentinel(sn, String(sn.options?.name ?? '?'), responseMs);
  }
  return new Single(redis as NodeRedisClient, responseMs);
}

/** A node-redis client `Client.connect*` made, not connected yet; `name` as errors say it. */
export interface Unconnected {
  redis: NodeRedis;
  name: string;
  connect(): Promise<unknown>;
}

/**
 * node-redis 6 gives every command a 5 s `timeout` by default (5.0 had no such option): an
 * AbortSignal.timeout and its listener per command, about half the client CPU of an
 * uncontended acquire + release. That timeout only covers the time a command waits in
 * node-redis's write queue (it is removed once the command is written, so it never bounds a
 * reply), and the connections this package makes do not queue (`disableOfflineQueue`):
 * `connect()` turns it off (0 = none); replies are bounded by `responseTimeout` instead.
 * Clients you hand over, and the cluster's node clients, keep node-redis's setting.
 */
const NO_QUEUE_TIMEOUT = { timeout: 0 };
/**
 * `createClient`'s options; typed loosely since node-redis 5.0's command options had no
 * `timeout` (it ignores it).
 */
type ClientConfig = Parameters<typeof createClient>[0];

/** A client of one server (`redis://host:port/db`). */
export function unconnectedSingle(url: string): Unconnected {
  // Reconnects after a drop; while disconnected, commands fail at once instead of queueing
  // (a queued RELEASE re-sent later, or a renewal answered too late, helps nobody).
  // The first connection fails connect() at once; a dropped one is made again (up to 0.5 s
  // apart) as node-redis does by default.
  let ready = false;
  const reconnectStrategy = (retries: number, cause: Error): number | Error =>
    ready ? Math.min(retries * 50, 500) : cause;
  const config = {
    url,
    disableOfflineQueue: true,
    commandOptions: NO_QUEUE_TIMEOUT,
    socket: { reconnectStrategy },
  };
  const redis = createClient(config as unknown as ClientConfig) as unknown as NodeRedisClient;
  redis.on('ready', () => (ready = true));
  redis.on('error', () => {}); // surfaces as the failing command's error
  return { redis, name: addressOf(redis), connect: () => redis.connect() };
}

/** A cluster client reaching the cluster through any of `rootNodes` (`redis://host:port` each). */
export function unconnectedCluster(rootNodes: string[]): Unconnected {
  const cluster = createCluster({
    rootNodes: rootNodes.map((url) => ({ url })),
    defaults: { disableOfflineQueue: true },
  }) as unknown as NodeRedisCluster;
  checkClusterClient(cluster); // before connecting: nothing to close
  cluster.on('error', () => {});
  return { redis: cluster, name: 'cluster', connect: () => cluster.connect() };
}

/** A Sentinel client of `service` (`sentinels`: `host:port` each). */
export function unconnectedSentinel(sentinels: string[], service: string): Unconnected {
  const sentinelRootNodes = sentinels.map((x) => {
    const at = x.lastIndexOf(':');
    return { host: x.slice(0, at), port: Number(x.slice(at + 1)) };
  });
  const sentinel = createSentinel({
    name: service,
    sentinelRootNodes,
  }) as unknown as NodeRedisSentinel;
  sentinel.on('error', () => {});
  return {
    redis: sentinel,
    name: `sentinel service ${service}`,
    connect: () => sentinel.connect(),
  };
}
