/**
 * A {@link Link} is one node-redis client (one connection to one server) as the watchdog
 * sees it: what it is called in errors, and the last moment it was known open — the
 * contract's "bound connection known open" (a hold bound with BIND can only have been cut by
 * the server a grace after that connection closed).
 */
import { now } from './clock.js';
import { ResponseTimeoutError, noteServer, replyText } from './errors.js';

/**
 * A node-redis value this package passes through without looking inside (command options,
 * event arguments, node descriptions): typed loosely, as the interfaces below must accept
 * node-redis 5.x and 6.x clients, whose generic types differ.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Loose = any;

/** What this package needs of a node-redis client (`createClient()` or a duplicate). */
export interface NodeRedisClient {
  sendCommand(args: readonly string[], options?: Loose): Promise<unknown>;
  duplicate(overrides?: Loose): NodeRedisClient;
  connect(): Promise<unknown>;
  destroy(): void;
  close?(): Promise<void>;
  quit?(): Promise<unknown>;
  readonly isOpen: boolean;
  on(event: string, listener: (...args: Loose[]) => void): unknown;
  removeListener?(event: string, listener: (...args: Loose[]) => void): unknown;
  readonly options?: Loose;
  subscribe?(channel: string, listener: (...args: Loose[]) => void): Promise<unknown>;
  unsubscribe?(channel?: string, listener?: (...args: Loose[]) => void): Promise<unknown>;
}

/** A command's reply and the moment (monotonic ms) it was sent. */
export interface Sent {
  reply: unknown;
  sentAt: number;
  /** The connection epoch that answered: a BIND in the command bound the hold to it. */
  epoch: number;
  link: Link;
}

/** The client's address as errors name it. */
export function addressOf(client: NodeRedisClient): string {
  const socket = client.options?.socket ?? {};
  if (socket.path) return String(socket.path);
  if (socket.host || socket.port) return `${socket.host ?? 'localhost'}:${socket.port ?? 6379}`;
  const url = client.options?.url;
  if (url) {
    try {
      const u = new URL(url);
      return `${u.hostname || 'localhost'}:${u.port || 6379}`;
    } catch {
      /* not a URL: fall through */
    }
  }
  return 'localhost:6379';
}

/** A command on its way: when it runs out of time, and how to fail it then. */
interface InFlight {
  at: number;
  fail: (err: Error) => void;
}

/**
 * `promise`, or `timedOut()`'s error once `ms` have passed (then `onTimeout` runs: close what
 * hangs). For the calls that are not a command on a {@link Link}: connecting, subscribing,
 * closing.
 */
export function within<T>(
  promise: Promise<T>,
  ms: number,
  timedOut: () => Error,
  onTimeout: () => void = () => {},
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      onTimeout();
      reject(timedOut());
    }, ms);
    timer.unref();
    promise.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

export class Link {
  readonly name: string;
  /** Changes whenever the connection may have closed or been replaced. */
  private epoch = 0;
  private lastOpen: number;
  /** Last known-open moment of earlier epochs that holds may still be bound to. */
  private readonly past = new Map<number, number>();
  private readonly onChange = (): void => this.bump(-Infinity);
  private readonly onReady = (): void => this.bump(now());
  /**
   * Commands sent and not answered, oldest first. All have the same response time-out, so one
   * timer (for the oldest) bounds them all: a command costs no timer of its own.
   */
  private readonly inflight = new Set<InFlight>();
  private timer: NodeJS.Timeout | null = null;

  /** `responseMs`: how long a command may go unanswered (the client's `responseTimeout`). */
  constructor(
    readonly client: NodeRedisClient,
    readonly responseMs: number,
    name?: string,
  ) {
    this.name = name ?? addressOf(client);
    this.lastOpen = client.isOpen ? now() : -Infinity;
    for (const ev of ['end', 'error', 'reconnecting']) client.on(ev, this.onChange);
    client.on('ready', this.onReady);
  }

  /** Stop watching the connection; what is still in flight fails with `err` (the client closed). */
  detach(err: Error): void {
    for (const ev of ['end', 'error', 'reconnecting'])
      this.client.removeListener?.(ev, this.onChange);
    this.client.removeListener?.('ready', this.onReady);
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    for (const f of this.inflight) f.fail(err);
    this.inflight.clear();
  }

  private bump(open: number): void {
    this.past.set(this.epoch, this.lastOpen);
    if (this.past.size > 16) this.past.delete(this.past.keys().next().value as number);
    this.epoch += 1;
    this.lastOpen = open;
  }

  get currentEpoch(): number {
    return this.epoch;
  }

  /** The last moment connection `epoch` was known open (-Infinity when never). */
  knownOpen(epoch: number): number {
    return epoch === this.epoch ? this.lastOpen : (this.past.get(epoch) ?? -Infinity);
  }

  /**
   * Send one command. An answer (even an error reply) proves the connection was open when the
   * command was sent, unless the connection changed in between. `sentAt` (default: now) must
   * not be later than the send: a caller that has just read the clock passes that reading.
   */
  send(args: readonly string[], sentAt = now()): Promise<Sent> {
    const epoch = this.epoch;
    const reply = this.client.sendCommand(args);
    // The reply, or a ResponseTimeoutError when it has not come `responseMs` after `sentAt`.
    // The connection stays: a late answer is dropped, and a server that was only slow (or
    // stopped and resumed) goes on answering the next commands.
    return new Promise<Sent>((resolve, reject) => {
      const f: InFlight = { at: sentAt + this.responseMs, fail: reject };
      this.inflight.add(f);
      if (!this.timer) this.arm(f.at);
      reply.then(
        (v) => {
          this.inflight.delete(f);
          this.seen(epoch, sentAt);
          resolve({ reply: v, sentAt, epoch: this.epoch, link: this });
        },
        (err) => {
          this.inflight.delete(f);
          if (replyText(err) !== null) this.seen(epoch, sentAt);
          noteServer(err, this.name);
          reject(err);
        },
      );
    });
  }

  private arm(at: number): void {
    this.timer = setTimeout(this.expire, Math.max(0, at - now()));
    this.timer.unref();
  }

  private readonly expire = (): void => {
    this.timer = null;
    const t = now();
    for (const f of this.inflight) {
      if (f.at > t) return this.arm(f.at);
      this.inflight.delete(f);
      f.fail(ResponseTimeoutError.of(this.name, 'answer', this.responseMs));
    }
  };

  /** An answer to a command sent at `sentAt` on connection `epoch` came back. */
  private seen(epoch: number, sentAt: number): void {
    if (this.epoch === epoch && sentAt > this.lastOpen) this.lastOpen = sentAt;
  }
}

/** Close `conn` now, whatever it is doing (connecting, waiting, closed already). */
export function destroy(conn: { destroy?(): unknown }): void {
  try {
    const done = conn.destroy?.(); // a Sentinel client's is a promise
    if (done instanceof Promise) done.catch(() => {});
  } catch {
    /* already gone */
  }
}
