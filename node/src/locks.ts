/**
 * What `client.lock()`, `client.rwlock()` and `client.semaphore()` hand out, and their
 * options: a request (kind, name, lease, ...) checked when it is made, acquired through the
 * client.
 */
import type { Held } from './hold.js';
import { LEASE_DEFAULT_MS, Request, makeRequest } from './protocol.js';

/**
 * @internal What a lock needs of the client that made it: its acquire. The client passes
 * itself (this file does not import client.ts, which imports it).
 */
export interface Acquirer {
  acquireRequest(req: Request, opts: AcquireOptions): Promise<Held | null>;
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
  /**
   * How long to wait (ms, finite, >= 0): undefined = no limit (the acquire then never
   * resolves `null`), 0 = do not wait.
   */
  timeout?: number | undefined;
  /**
   * Aborting it rejects the acquire (with the signal's reason) and leaves nothing held or
   * queued.
   */
  signal?: AbortSignal | undefined;
  /** Acquire as this owner (reentrancy): `client.newOwner()` or a held lock's `owner`. */
  owner?: string | undefined;
}

/** An acquire without a time-out: it waits until granted, so it resolves a hold, never `null`. */
export type WaitOptions = Omit<AcquireOptions, 'timeout'> & { timeout?: undefined };

export interface SemaphoreOptions {
  /** Permits in all (required). */
  capacity: number;
  lease?: number;
}

export interface SemaphoreAcquireOptions extends AcquireOptions {
  /** Permits to take (default 1). */
  count?: number | undefined;
}

/** {@link SemaphoreAcquireOptions} without a time-out (resolves a hold, never `null`). */
export type SemaphoreWaitOptions = Omit<SemaphoreAcquireOptions, 'timeout'> & {
  timeout?: undefined;
};

/** `acquire()` without options (one object for all: never written to). */
const NO_OPTIONS: AcquireOptions = Object.freeze({});

export class Lock {
  readonly #client: Acquirer;
  /** @internal */
  readonly request: Request;

  /** @internal */
  constructor(client: Acquirer, request: Request) {
    this.#client = client;
    this.request = request;
  }

  get name(): string {
    return this.request.key;
  }

  /** Take the lock, waiting without limit: the hold. */
  acquire(opts?: WaitOptions): Promise<Held>;
  /**
   * Take the lock: the hold, or null when the wait ran out (or, with `timeout: 0`, it is
   * taken).
   */
  acquire(opts: AcquireOptions): Promise<Held | null>;
  acquire(opts: AcquireOptions = NO_OPTIONS): Promise<Held | null> {
    return this.#client.acquireRequest(this.request, opts);
  }
}

export class ReadWriteLock {
  readonly #client: Acquirer;
  readonly #opts: LockOptions;
  readonly name: string;

  /** @internal */
  constructor(client: Acquirer, name: string, opts: LockOptions) {
    // Checks the options now.
    makeRequest('write', name, { ...opts, lease: opts.lease ?? LEASE_DEFAULT_MS });
    this.#client = client;
    this.name = name;
    this.#opts = opts;
  }
  read(): Lock {
    const { lockDelay: _ignored, ...rest } = this.#opts;
    return new Lock(
      this.#client,
      makeRequest('read', this.name, { ...rest, lease: rest.lease ?? LEASE_DEFAULT_MS }),
    );
  }
  write(): Lock {
    return new Lock(
      this.#client,
      makeRequest('write', this.name, {
        ...this.#opts,
        lease: this.#opts.lease ?? LEASE_DEFAULT_MS,
      }),
    );
  }
}

export class Semaphore {
  readonly #client: Acquirer;
  readonly #request: Request;

  /** @internal */
  constructor(client: Acquirer, request: Request) {
    this.#client = client;
    this.#request = request;
  }
  get name(): string {
    return this.#request.key;
  }
  /** Take `count` permits (default 1), waiting in the server's FIFO queue without limit. */
  acquire(opts?: SemaphoreWaitOptions): Promise<Held>;
  /** Take `count` permits (default 1): the hold, or null when the wait ran out. */
  acquire(opts: SemaphoreAcquireOptions): Promise<Held | null>;
  acquire(opts: SemaphoreAcquireOptions = NO_OPTIONS): Promise<Held | null> {
    const { count, ...rest } = opts;
    const r = this.#request;
    const req =
      count === undefined ? r : makeRequest('semaphore', r.key, { ...r, lease: r.leaseMs, count });
    return this.#client.acquireRequest(req, rest);
  }
}
