/**
 * The dlock commands as words and their replies as values. No I/O here: argument order,
 * option names, limits and reply shapes are written once, in this file.
 */
import { randomBytes } from 'node:crypto';
import { ConfigError } from './errors.js';

/** What a hold is: an exclusive lock, a side of a read-write lock, or semaphore permits. */
export type Kind = 'lock' | 'read' | 'write' | 'semaphore';

/** The longest lease or wait the module takes (ten years, ms). */
const MAX_MS = 315_360_000_000;
const MAX_LOCK_DELAY_MS = 60_000;
const MAX_PERMITS = 1_000_000;
/** The lease when none is given (ms). */
export const LEASE_DEFAULT_MS = 30_000;
/**
 * How long a command may go unanswered when `responseTimeout` is not given (ms): the Rust
 * client's default.
 */
export const RESPONSE_TIMEOUT_DEFAULT_MS = 5_000;

/** One acquire's fixed part: everything but the owner and the wait. */
export interface Request {
  readonly kind: Kind;
  readonly key: string;
  readonly leaseMs: number;
  readonly fence: boolean;
  readonly lockDelayMs: number | undefined;
  readonly capacity: number;
  /** Permits asked (semaphores); 1 otherwise. */
  readonly count: number;
}

function checkInt(value: number, what: string, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(
      `${what} must be an integer from ${min} to ${max} (milliseconds or a count), got ${value}`,
    );
  }
  return value;
}

export function checkLease(ms: number): number {
  return checkInt(ms, 'lease', 1, MAX_MS);
}

export function checkBind(ms: number | null): number | null {
  return ms === null ? null : checkInt(ms, 'bind', 0, MAX_MS);
}

export function checkResponseTimeout(ms: number): number {
  return checkInt(ms, 'responseTimeout', 1, MAX_MS);
}

export function makeRequest(
  kind: Kind,
  key: string,
  opts: {
    lease: number;
    fence?: boolean | undefined;
    lockDelay?: number | undefined;
    capacity?: number;
    count?: number;
  },
): Request {
  if (typeof key !== 'string' || key.length === 0)
    throw new ConfigError('the lock name must be a non-empty string');
  const lockDelayMs =
    opts.lockDelay === undefined
      ? undefined
      : checkInt(opts.lockDelay, 'lockDelay', 0, MAX_LOCK_DELAY_MS);
  if (lockDelayMs !== undefined && (kind === 'read' || kind === 'semaphore')) {
    throw new ConfigError(`lockDelay is an option of locks and write locks, not of ${kind}`);
  }
  if (kind === 'semaphore' && opts.capacity === undefined)
    throw new ConfigError(
      `semaphore ${JSON.stringify(key)} needs its capacity: client.semaphore(name, { capacity })`,
    );
  const capacity =
    kind === 'semaphore' ? checkInt(opts.capacity ?? NaN, 'capacity', 1, MAX_PERMITS) : 0;
  const count = kind === 'semaphore' ? checkInt(opts.count ?? 1, 'count', 1, capacity) : 1;
  return {
    kind,
    key,
    leaseMs: checkLease(opts.lease),
    fence: opts.fence ?? false,
    lockDelayMs,
    capacity,
    count,
  };
}

/**
 * The WAIT argument: undefined (no wait) for 0, `0` (no limit) for no time-out. A negative,
 * NaN or infinite time-out is refused (leave it out to wait without limit).
 */
export function waitArg(timeout: number | undefined): number | undefined {
  if (timeout === undefined) return 0;
  if (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout < 0) {
    throw new ConfigError(
      'timeout must be a finite number of milliseconds >= 0 (leave it out to wait without ' +
        `limit), got ${String(timeout)}`,
    );
  }
  return timeout === 0 ? undefined : Math.max(1, Math.min(Math.ceil(timeout), MAX_MS));
}

export function acquireCommand(
  r: Request,
  owner: string,
  wait: number | undefined,
  bindMs: number | null,
): string[] {
  let args: string[];
  if (r.kind === 'lock') args = ['DLOCK.ACQUIRE', r.key, owner, String(r.leaseMs)];
  else if (r.kind === 'semaphore') {
    args = ['DLOCK.SEMAPHORE', r.key, owner, String(r.capacity), String(r.leaseMs)];
    if (r.count !== 1) args.push('COUNT', String(r.count));
  } else args = ['DLOCK.RWLOCK', r.key, owner, r.kind.toUpperCase(), String(r.leaseMs)];
  if (wait !== undefined) args.push('WAIT', String(wait));
  if (r.fence && r.kind !== 'semaphore') args.push('FENCE');
  if (bindMs !== null) args.push(...bindArgs(bindMs, r.leaseMs));
  if (r.lockDelayMs !== undefined) args.push('LOCKDELAY', String(r.lockDelayMs));
  return args;
}

export function releaseCommand(key: string, owner: string, kind: Kind, count: number): string[] {
  const args = ['DLOCK.RELEASE', key, owner];
  if (kind === 'read' || kind === 'write') args.push(kind.toUpperCase());
  else if (kind === 'semaphore' && count !== 1) args.push('COUNT', String(count));
  return args;
}

export function renewCommand(
  key: string,
  owner: string,
  leaseMs: number,
  bindMs: number | null,
): string[] {
  const args = ['DLOCK.RENEW', key, owner, String(leaseMs)];
  if (bindMs !== null) args.push(...bindArgs(bindMs, leaseMs));
  return args;
}

/** The module's grace for a bare `BIND`: 2 s, or the lease when shorter. */
export const MODULE_BIND_MS = 2000;

/**
 * `BIND grace-ms` (the grace at most the lease), or a bare `BIND` where that is the module's
 * default grace: the default then costs the server no number to read.
 */
function bindArgs(bindMs: number, leaseMs: number): string[] {
  const grace = Math.min(bindMs, leaseMs);
  return grace === Math.min(MODULE_BIND_MS, leaseMs) ? ['BIND'] : ['BIND', String(grace)];
}

/**
 * An error reply saying the module does not know an option that was sent (BIND on a module
 * older than it): a syntax error, or an arity error for `DLOCK.RENEW`, whose arity is fixed
 * on such modules.
 */
export function isUnknownOption(text: string | null): boolean {
  return text !== null && /^(ERR )?(syntax error|wrong number of arguments)/i.test(text);
}

/** (hold count or permits, fencing token) of a grant; null when not granted. */
export function parseGrant(
  r: Request,
  reply: unknown,
): { count: number; token: number | null } | null {
  if (reply === null || reply === undefined) return null;
  if (Array.isArray(reply)) return { count: Number(reply[0]), token: Number(reply[1]) };
  return { count: Number(reply), token: null };
}

/** One row of `DLOCK.INFO`'s holders. */
export interface Holder {
  owner: string;
  /** `exclusive`, `read`, `write` or `permits`. */
  mode: string;
  /** Hold count, or permits held. */
  count: number;
  /** This holder's remaining lease (ms). */
  leaseMs: number;
}

/** `DLOCK.INFO key` as a value. */
export interface LockInfo {
  /** `lock`, `rwlock`, `semaphore` or `none`. */
  kind: string;
  /** `exclusive`, `read`, `write`; null for `none` and semaphores. */
  mode: string | null;
  /** Remaining TTL of the key: -1 no expiry, -2 no key. */
  leaseMs: number;
  holders: Holder[];
  waiters: number;
  fence: number | null;
  /** Semaphores only. */
  capacity: number | null;
  /** Semaphores only: permits nobody holds. */
  available: number | null;
  /** Lock-delay left (ms). */
  delayMs: number | null;
}

/** One row of `DLOCK.WAITERS key`, in FIFO order. */
export interface Waiter {
  owner: string;
  /** `lock`, `read`, `write` or `permits:<n>`. */
  request: string;
  waitedMs: number;
  /** -1 for a wait without limit. */
  timeoutLeftMs: number;
}

const text = (v: unknown): string => (Buffer.isBuffer(v) ? v.toString() : String(v));
const optInt = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** A RESP3 map (node-redis: an object or a Map) or a RESP2 flat field/value array. */
function fieldsOf(reply: unknown): Map<string, unknown> {
  if (reply instanceof Map) return new Map([...reply].map(([k, v]) => [text(k), v]));
  if (Array.isArray(reply)) {
    const m = new Map<string, unknown>();
    for (let i = 0; i + 1 < reply.length; i += 2) m.set(text(reply[i]), reply[i + 1]);
    return m;
  }
  return new Map(Object.entries(reply as object));
}

export function parseInfo(reply: unknown): LockInfo {
  const f = fieldsOf(reply);
  const holders = ((f.get('holders') as unknown[][]) ?? []).map(([o, m, c, l]) => ({
    owner: text(o),
    mode: text(m),
    count: Number(c),
    leaseMs: Number(l),
  }));
  const mode = f.get('mode');
  return {
    kind: text(f.get('kind')),
    mode: mode === null || mode === undefined ? null : text(mode),
    leaseMs: Number(f.get('lease-ms')),
    holders,
    waiters: Number(f.get('waiters')),
    fence: optInt(f.get('fence')),
    capacity: optInt(f.get('capacity')),
    available: optInt(f.get('available')),
    delayMs: optInt(f.get('delay-ms')),
  };
}

export function parseWaiters(reply: unknown): Waiter[] {
  return (reply as unknown[][]).map(([o, r, w, t]) => ({
    owner: text(o),
    request: text(r),
    waitedMs: Number(w),
    timeoutLeftMs: Number(t),
  }));
}

/** The INFO holder mode of a kind. */
export function infoMode(kind: Kind): string {
  return kind === 'lock' ? 'exclusive' : kind === 'semaphore' ? 'permits' : kind;
}

/** 128 random bits: the first half of every owner id of one client. */
export function newOwnerPrefix(): string {
  return randomBytes(16).toString('hex');
}

/**
 * A redirect in an error reply: `MOVED slot host:port`, `ASK slot host:port`, `TRYAGAIN` or
 * `CLUSTERDOWN`.
 */
export function redirectOf(
  text: string | null,
): { kind: 'MOVED' | 'ASK' | 'TRYAGAIN'; address: string } | null {
  if (text === null) return null;
  const m = /^(MOVED|ASK) \d+ (\S+)/.exec(text);
  if (m) return { kind: m[1] as 'MOVED' | 'ASK', address: m[2]! };
  // The cluster is changing or down for the slot: pause and ask again (within the wait).
  if (text.startsWith('TRYAGAIN') || text.startsWith('CLUSTERDOWN'))
    return { kind: 'TRYAGAIN', address: '' };
  return null;
}
