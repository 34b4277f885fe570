/**
 * Where a key's commands go: one server (standalone), the key's master (Cluster: following
 * MOVED / ASK / TRYAGAIN), or the master a Sentinel service names. Each server connection is
 * a {@link Link}; each has its own pool of dedicated connections for waits.
 */
import { createClient } from 'redis';
import { now } from './clock.js';
import { RedirectError, replyText, serverOf } from './errors.js';
import { Link, NodeRedisClient, Sent, WaitPool } from './link.js';
import { redirectOf } from './protocol.js';

/** What this package needs of a node-redis cluster (`createCluster()`). */
export interface NodeRedisCluster {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[], options?: any): Promise<unknown>;
  getNodeClientForKey(key: string, isReadonly?: boolean): Promise<NodeRedisClient>;
  readonly nodeByAddress: Map<string, any>;
  nodeClient(node: any): Promise<NodeRedisClient>;
  readonly masters: any[];
  readonly isOpen?: boolean;
  connect(): Promise<unknown>;
  close?(): Promise<void>;
  destroy?(): void;
  on(event: string, listener: (...args: any[]) => void): unknown;
  subscribe?(channel: string, listener: (...args: any[]) => void): Promise<unknown>;
  unsubscribe?(channel?: string, listener?: (...args: any[]) => void): Promise<unknown>;
}

/** What this package needs of a node-redis Sentinel client (`createSentinel()`). */
export interface NodeRedisSentinel {
  getMasterNode(): { host: string; port: number } | undefined;
  readonly options?: any;
  readonly isOpen?: boolean;
  connect(): Promise<unknown>;
  close?(): Promise<void>;
  destroy?(): void;
  on(event: string, listener: (...args: any[]) => void): unknown;
}

/** The most redirects one command follows (a slot moving twice under it is already rare). */
const MAX_REDIRECTS = 8;
const TRYAGAIN_PAUSE_MS = 25;

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

export abstract class Topology {
  abstract readonly name: string;
  private readonly pools = new Map<Link, WaitPool>();

  /** Connect what the user handed over unconnected. */
  abstract prepare(): Promise<void>;
  /** The shared connection of the server that has `key`. */
  abstract link(key: string): Promise<Link>;
  /** That connection when it is known without asking (standalone), else null: saves the
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
  abstract subscriber(): Promise<{ subscribe(ch: string, fn: () => void): Promise<unknown>; unsubscribe(ch: string, fn: () => void): Promise<unknown> }>;
  abstract closeShared(owned: boolean): Promise<void>;

  pool(link: Link): WaitPool {
    let p = this.pools.get(link);
    if (!p) this.pools.set(link, (p = new WaitPool(link.client)));
    return p;
  }

  closePools(): void {
    for (const p of this.pools.values()) p.close();
  }

  /**
   * Run `attempt` on the key's link, following redirects until `deadline` (monotonic ms):
   * MOVED asks the cluster for the new owner, ASK goes to the named node once (`asking`:
   * send ASKING first on the same connection), TRYAGAIN pauses briefly.
   */
  async routed<T>(key: string, deadline: number, attempt: (link: Link, asking: boolean) => Promise<T>): Promise<T> {
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
          throw new RedirectError(`${at}: ${replyText(err)} (gave up after ${redirects + 1} redirects)`, at, { cause: err });
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
   * A short command on the key's server, redirects followed (within 5 s). `sentAt`: a moment
   * taken just before (it must not be later than the send), to save reading the clock again.
   */
  send(key: string, args: readonly string[], sentAt?: number): Promise<Sent> {
    // Standalone: one connection and no redirects, so no routing (the uncontended path).
    const direct = this.linkNow(key);
    if (direct) return direct.send(args, sentAt);
    return this.routed(key, now() + 5000, (link, asking) => sendAsking(link, asking, args));
  }
}

/** `args` on `link`, preceded by ASKING when an ASK redirect said so (both written in order). */
export function sendAsking(link: Link, asking: boolean, args: readonly string[]): Promise<Sent> {
  if (!asking) return link.send(args);
  const ask = link.client.sendCommand(['ASKING']);
  ask.catch(() => {}); // its failure is the command's
  return link.send(args);
}

export class Standalone extends Topology {
  readonly name: string;
  private readonly shared: Link;
  private sub: NodeRedisClient | null = null;

  constructor(client: NodeRedisClient) {
    super();
    this.shared = new Link(client);
    this.name = this.shared.name;
  }
  async prepare(): Promise<void> {
    if (!this.shared.client.isOpen) await this.shared.client.connect();
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
  async subscriber() {
    if (!this.sub) {
      const sub = this.shared.client.duplicate();
      sub.on('error', () => {});
      await sub.connect();
      this.sub = sub;
    }
    const sub = this.sub;
    return {
      subscribe: (ch: string, fn: () => void) => sub.subscribe!(ch, fn),
      unsubscribe: (ch: string, fn: () => void) => sub.unsubscribe!(ch, fn),
    };
  }
  async closeShared(owned: boolean): Promise<void> {
    this.sub?.destroy();
    this.shared.detach();
    if (owned) await closeClient(this.shared.client);
  }
}

export class Cluster extends Topology {
  readonly name: string;
  private readonly byClient = new Map<NodeRedisClient, Link>();

  constructor(private readonly cluster: NodeRedisCluster) {
    super();
    this.name = 'cluster';
  }
  private linkOf(client: NodeRedisClient): Link {
    let l = this.byClient.get(client);
    if (!l) this.byClient.set(client, (l = new Link(client)));
    return l;
  }
  async prepare(): Promise<void> {
    if (this.cluster.isOpen === false) await this.cluster.connect();
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
    if (!node) throw new RedirectError(`ASK to ${address}, a node the cluster client does not know`, this.name);
    return this.linkOf(await this.cluster.nodeClient(node));
  }
  links(): Link[] {
    return [...this.byClient.values()];
  }
  async subscriber() {
    const c = this.cluster;
    return {
      subscribe: (ch: string, fn: () => void) => c.subscribe!(ch, fn),
      unsubscribe: (ch: string, fn: () => void) => c.unsubscribe!(ch, fn),
    };
  }
  async closeShared(owned: boolean): Promise<void> {
    for (const l of this.byClient.values()) l.detach();
    if (owned) await closeClient(this.cluster);
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
  private subClient: NodeRedisClient | null = null;

  constructor(private readonly sentinel: NodeRedisSentinel, service: string) {
    super();
    this.name = `sentinel service ${service}`;
  }
  async prepare(): Promise<void> {
    if (this.sentinel.isOpen === false) await this.sentinel.connect();
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
    const client = createClient({ ...base, socket: { ...(base.socket ?? {}), host: master.host, port: master.port, reconnectStrategy: false } }) as unknown as NodeRedisClient;
    client.on('error', () => {});
    return client;
  }
  private async open(): Promise<Link> {
    if (this.current) this.retired.push(this.current);
    const client = this.newClient();
    await client.connect();
    const link = new Link(client);
    this.current = link;
    return link;
  }
  links(): Link[] {
    return this.current ? [this.current] : [];
  }
  async subscriber() {
    if (!this.subClient?.isOpen) {
      this.subClient = this.newClient();
      await this.subClient.connect();
    }
    const sub = this.subClient;
    return {
      subscribe: (ch: string, fn: () => void) => sub.subscribe!(ch, fn),
      unsubscribe: (ch: string, fn: () => void) => sub.unsubscribe!(ch, fn),
    };
  }
  async closeShared(owned: boolean): Promise<void> {
    for (const l of [...this.retired, ...(this.current ? [this.current] : [])]) {
      l.detach();
      l.client.destroy();
    }
    this.subClient?.destroy();
    if (owned) await closeClient(this.sentinel);
  }
}

async function closeClient(c: { close?(): Promise<void>; quit?(): Promise<unknown>; destroy?(): void }): Promise<void> {
  try {
    if (c.close) await c.close();
    else if (c.quit) await c.quit();
    else c.destroy?.();
  } catch {
    c.destroy?.();
  }
}
