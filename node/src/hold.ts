/**
 * A hold as users get it ({@link Held}), and, internal, what the watchdog keeps per held
 * (key, owner, kind): the lease it last set and when, the connection the hold is bound to,
 * and the holds it stands for. The contract's deadline rule lives in `deadlineAt()`.
 */
import { LostError, LostReason } from './errors.js';
import type { Link } from './link.js';
import type { Kind } from './protocol.js';

/** @internal */
export interface Binding {
  link: Link;
  epoch: number;
  graceMs: number;
}

/** @internal */
export class Entry {
  /** Usually one (an array: a Set per hold costs more than it saves). */
  readonly holds: Held[] = [];
  /** Monotonic time of the next renewal. */
  nextDue = Infinity;
  renewing = false;
  gone = false;

  constructor(
    /** The client's map key of this entry (kind, owner, key). */
    readonly id: string,
    readonly key: string,
    readonly owner: string,
    readonly kind: Kind,
    public leaseMs: number,
    /** Send time of the last command that set the lease, plus the lease. */
    public leaseDeadline: number,
    public bound: Binding | null,
  ) {}

  /**
   * The moment after which the server may have ended this hold (then it is lost,
   * `lease_expired`): the earlier of the lease deadline and, for a bound hold, the last
   * moment its connection was known open plus the grace.
   */
  deadlineAt(): number {
    const b = this.bound;
    return b
      ? Math.min(this.leaseDeadline, b.link.knownOpen(b.epoch) + b.graceMs)
      : this.leaseDeadline;
  }

  /** Take `h` out of the holds; whether it was there. */
  drop(h: Held): boolean {
    const i = this.holds.indexOf(h);
    if (i < 0) return false;
    this.holds.splice(i, 1);
    return true;
  }

  /** Set what a command answered at `sentAt` did to the lease (and the binding). */
  set(sentAt: number, leaseMs: number, bound: Binding | null | undefined): void {
    this.leaseMs = leaseMs;
    this.leaseDeadline = sentAt + leaseMs;
    if (bound !== undefined) this.bound = bound;
    this.nextDue = sentAt + leaseMs / 3;
  }
}

/** What a {@link Held} needs of its client. @internal */
export interface HoldOwner {
  /** Lose the hold's entry now if its deadline has passed. */
  checkDeadline(entry: Entry): void;
  releaseHold(held: Held): Promise<boolean>;
  renewHold(held: Held): Promise<boolean>;
}

/**
 * A granted hold. `token`: the fencing token (`fence: true`); `count`: the owner's hold count
 * (reentrant) or its permits; `lost`: an AbortSignal aborted when the hold is lost, its reason
 * a {@link LostError} saying why. Reading `lost` compares the hold's deadline with the clock
 * first, so a process that was stopped or whose event loop stalled sees the truth at once.
 */
export class Held {
  readonly key: string;
  readonly kind: Kind;
  readonly owner: string;
  readonly #client: HoldOwner;
  /** Made when `lost` is first read (most holds are released without anyone asking). */
  #ctrl: AbortController | null = null;
  #why: { reason: LostReason; cause?: unknown } | null = null;
  /** @internal */
  released = false;
  /** @internal */
  readonly entry: Entry;

  private constructor(
    client: HoldOwner,
    entry: Entry,
    readonly count: number,
    readonly token: number | null,
    /** Permits this acquire took (semaphores), else 1. */
    readonly permits: number,
    readonly server: string,
  ) {
    this.#client = client;
    this.entry = entry;
    this.key = entry.key;
    this.kind = entry.kind;
    this.owner = entry.owner;
  }

  /** @internal the client's way to make one (the constructor is not part of the API). */
  static make(
    client: HoldOwner,
    entry: Entry,
    count: number,
    token: number | null,
    permits: number,
    server: string,
  ): Held {
    return new Held(client, entry, count, token, permits, server);
  }

  /**
   * Aborted when the hold is lost (checked against the clock when read). A released hold is
   * not lost: its signal stays as it was.
   */
  get lost(): AbortSignal {
    if (!this.#why) this.#client.checkDeadline(this.entry);
    if (!this.#ctrl) {
      this.#ctrl = new AbortController();
      if (this.#why) this.#abort();
    }
    return this.#ctrl.signal;
  }

  /** Whether the hold is lost now (`lost.aborted`, checked against the clock). */
  get isLost(): boolean {
    if (!this.#why) this.#client.checkDeadline(this.entry);
    return this.#why !== null;
  }

  /**
   * Why the hold is no longer held, checked against the clock: `'released'` once released,
   * else the loss's reason; null while it is held.
   */
  get lostReason(): LostReason | null {
    if (this.released) return 'released';
    return this.isLost ? this.#why!.reason : null;
  }

  /** Monotonic ms (`performance.now()`) until which the hold is surely still held. */
  get validUntil(): number {
    return this.isLost ? -Infinity : this.entry.deadlineAt();
  }

  /**
   * Give the hold back: true when the owner's last hold on the lock is gone. A hold that is
   * no longer held (released already, or lost) rejects with a `NotHeldError`.
   */
  release(): Promise<boolean> {
    return this.#client.releaseHold(this);
  }

  /**
   * Renew the lease now (the watchdog does it by itself): true, or a `NotHeldError`
   * when the hold is gone (the server said so, or it was lost or released before).
   */
  renew(): Promise<boolean> {
    return this.#client.renewHold(this);
  }

  /** @internal */
  lose(reason: LostReason, cause?: unknown): void {
    if (this.#why || this.released) return;
    this.#why = cause === undefined ? { reason } : { reason, cause };
    if (this.#ctrl) this.#abort();
  }

  #abort(): void {
    const w = this.#why!;
    this.#ctrl!.abort(
      new LostError(this.key, w.reason, this.server, 'cause' in w ? { cause: w.cause } : undefined),
    );
  }

  /** For logs: what is held, by whom. */
  toString(): string {
    const what = `${this.kind} ${JSON.stringify(this.key)}`;
    return `Held(${what} owner=${this.owner} count=${this.count} token=${this.token})`;
  }
}
