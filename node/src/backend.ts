/**
 * The backend: the two ways to take a lock, and choosing one. The dlock module's commands
 * (native: one `WAIT` queued FIFO in the server, on a dedicated connection) and Redisson's
 * Lua scripts on plain Redis (script: try, then wait for the unlock message or the holder's
 * lease, and try again); `auto` asks the server whether it has the module.
 */
import { now } from './clock.js';
import {
  CommandError,
  ModuleNotLoadedError,
  ResponseTimeoutError,
  noteServer,
  replyText,
  serverOf,
  translate,
} from './errors.js';
import type { Entry } from './hold.js';
import type { Link, Sent } from './link.js';
import {
  Kind,
  Request,
  acquireCommand,
  infoMode,
  isUnknownOption,
  parseGrant,
  parseInfo,
  releaseCommand,
  renewCommand,
} from './protocol.js';
import {
  DEFAULT_CHANNEL_PREFIX,
  ScriptName,
  UNLOCK_MESSAGE,
  channelName,
  scriptSha,
  scriptText,
} from './scripts.js';
import { Topology } from './topology.js';

/** A grant: what the server answered and when the command that set the lease was sent. */
export interface Grant {
  count: number;
  token: number | null;
  sentAt: number;
  /** The connection the hold is bound to (BIND), null when unbound. */
  link: Link | null;
  epoch: number;
  /** Granted from the queue after a wait: its lease began at an unknown moment since `sentAt`. */
  waited: boolean;
  /** The server (`host:port`) that granted it. */
  server: string;
}

/** One acquire in progress. */
export interface Attempt {
  topo: Topology;
  req: Request;
  owner: string;
  /** Holds (or permits) the owner has on the key in this kind by our count, before. */
  before: number;
  /** Monotonic moment the acquire began (no later than its first command's send). */
  start: number;
  /** Monotonic deadline of the whole wait: the start for no wait, Infinity for no limit. */
  deadline: number;
  wait: boolean;
  signal: AbortSignal | undefined;
  /** The client's: aborted (with a `ClosedError`) when the client is closed. */
  closed: AbortSignal;
}

/**
 * What a release gives back: `count` (permits of a semaphore, else 1) of what `owner` holds
 * on `key` in `kind`; `leaseMs`, the hold's lease (Redisson's unlock script takes it).
 */
export interface Release {
  key: string;
  owner: string;
  kind: Kind;
  count: number;
  leaseMs: number;
}

export interface Backend {
  readonly native: boolean;
  acquire(a: Attempt): Promise<Grant | null>;
  renew(topo: Topology, e: Entry): Promise<Sent>;
  release(topo: Topology, r: Release): Promise<Sent>;
  /** The BIND grace this backend sends (null: none). */
  readonly bindMs: number | null;
}

/**
 * `promise`, or a rejection when one of `signals` aborts first (with its reason) or when
 * `until` (monotonic ms; Infinity: never) passes (with `late()`): `onCut(why)` runs first.
 */
function cutShort<T>(
  promise: Promise<T>,
  signals: readonly (AbortSignal | undefined)[],
  until: number,
  late: () => Error,
  onCut: (why: unknown) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const done = (): void => {
      clearTimeout(timer);
      for (const s of signals) s?.removeEventListener('abort', abort);
    };
    const cut = (why: unknown): void => {
      done();
      onCut(why);
      reject(why);
    };
    function abort(this: AbortSignal): void {
      cut(this.reason);
    }
    for (const s of signals) {
      if (s?.aborted) return cut(s.reason);
      s?.addEventListener('abort', abort, { once: true });
    }
    if (until !== Infinity) timer = setTimeout(() => cut(late()), Math.max(0, until - now()));
    promise.then(
      (v) => {
        done();
        resolve(v);
      },
      (e) => {
        done();
        reject(e);
      },
    );
  });
}

const noLate = (): Error => new Error('unreachable: no deadline');

export class Native implements Backend {
  readonly native = true;
  constructor(readonly bindMs: number | null) {}

  async acquire(a: Attempt): Promise<Grant | null> {
    const { topo, req, owner } = a;
    // First a try without WAIT on the shared connection: an uncontended acquire costs one
    // pipelined round trip and no dedicated connection.
    const first = await topo.send(
      req.key,
      acquireCommand(req, owner, undefined, this.bindMs),
      a.start,
    );
    const g = parseGrant(req, first.reply);
    if (g)
      return {
        count: g.count,
        token: g.token,
        sentAt: first.sentAt,
        link: this.bindMs === null ? null : first.link,
        epoch: first.epoch,
        waited: false,
        server: first.link.name,
      };
    if (!a.wait) return null;
    return topo.routed(req.key, a.deadline, (link, asking) => this.waitOn(a, link, asking));
  }

  /**
   * One `WAIT` on a dedicated connection to `link`'s server, for what is left of the wait;
   * its answer is awaited until the wait's deadline plus the response time-out.
   */
  private async waitOn(a: Attempt, link: Link, asking: boolean): Promise<Grant | null> {
    const left = a.deadline - now();
    if (left <= 0) return null;
    const waitMs = a.deadline === Infinity ? 0 : Math.max(1, Math.ceil(left));
    a.signal?.throwIfAborted();
    a.closed.throwIfAborted();
    const rt = a.topo.responseMs;
    const pool = a.topo.pool(link);
    const conn = await pool.take(Math.min(rt, a.deadline + rt - now()));
    if (a.signal?.aborted || a.closed.aborted) {
      pool.give(conn);
      a.signal?.throwIfAborted();
      a.closed.throwIfAborted();
    }
    const sentAt = now();
    if (asking) conn.sendCommand(['ASKING']).catch(() => {});
    let reply: unknown;
    let cut: unknown = undefined;
    try {
      const late = (): Error => ResponseTimeoutError.of(link.name, 'answer after the wait', rt);
      reply = await cutShort(
        conn.sendCommand(acquireCommand(a.req, a.owner, waitMs, this.bindMs)),
        [a.signal, a.closed],
        a.deadline + rt,
        late,
        (why) => {
          cut = why;
          pool.drop(conn); // closing the connection takes the waiter out of the server's queue
        },
      );
    } catch (err) {
      noteServer(err, link.name);
      if (cut === undefined && replyText(err) !== null) {
        pool.give(conn);
        throw err;
      }
      if (cut === undefined) pool.drop(conn);
      // A grant may have been made just before the connection closed: give it back. Not on a
      // closed client (nothing is sent after close: the server cuts it), and not waited for
      // after the time-out (it is the server that does not answer).
      if (a.closed.aborted) throw a.closed.reason;
      const back = giveBack(a, link).catch(() => {});
      if (!(err instanceof ResponseTimeoutError)) await back;
      throw err;
    }
    pool.give(conn);
    const g = parseGrant(a.req, reply);
    if (!g) return null;
    return { ...g, sentAt, link: null, epoch: 0, waited: true, server: link.name };
  }

  renew(topo: Topology, e: Entry): Promise<Sent> {
    return topo.send(e.key, renewCommand(e.key, e.owner, e.leaseMs, this.bindMs));
  }

  release(topo: Topology, r: Release): Promise<Sent> {
    return topo.send(r.key, releaseCommand(r.key, r.owner, r.kind, r.count));
  }
}

/**
 * Give back what a wait cut short may have been granted: what the owner holds on the key in
 * the request's kind beyond what it held before (a fresh owner: a blind RELEASE, nil when
 * nothing was granted).
 */
async function giveBack(a: Attempt, link: Link): Promise<void> {
  const { req, owner } = a;
  if (a.before === 0) {
    await link.send(releaseCommand(req.key, owner, req.kind, req.count));
    return;
  }
  const info = parseInfo((await link.send(['DLOCK.INFO', req.key])).reply);
  const mode = infoMode(req.kind);
  const excess =
    info.holders
      .filter((h) => h.owner === owner && h.mode === mode)
      .reduce((n, h) => n + h.count, 0) - a.before;
  if (excess <= 0) return;
  if (req.kind === 'semaphore') await link.send(releaseCommand(req.key, owner, req.kind, excess));
  else
    for (let i = 0; i < excess; i++) await link.send(releaseCommand(req.key, owner, req.kind, 1));
}

/** EVALSHA, or EVAL when the server does not have the script yet (NOSCRIPT). */
async function evalScript(
  link: Link,
  name: ScriptName,
  keys: string[],
  args: string[],
): Promise<Sent> {
  try {
    return await link.send(['EVALSHA', scriptSha(name), String(keys.length), ...keys, ...args]);
  } catch (err) {
    if (!replyText(err)?.startsWith('NOSCRIPT')) throw err;
    return link.send(['EVAL', scriptText(name), String(keys.length), ...keys, ...args]);
  }
}

/** How long a waiting script acquire sleeps at most between tries (no unlock message for
 * semaphores whose holder lapsed; the poll bounds a missed message). */
const SCRIPT_POLL_MS = 100;

export class Script implements Backend {
  readonly native = false;
  readonly bindMs = null;
  constructor(private readonly prefix: string = DEFAULT_CHANNEL_PREFIX) {}

  /** One try: a grant, or how long (ms, -1 unknown) until the holder's lease ends. */
  private async tryOnce(a: Attempt): Promise<Grant | number> {
    const { req, owner } = a;
    const [name, args]: [ScriptName, string[]] =
      req.kind === 'lock'
        ? ['lock', [String(req.leaseMs), owner]]
        : req.kind === 'semaphore'
          ? ['sem_acquire', [owner, String(req.capacity), String(req.leaseMs), String(req.count)]]
          : ['rw_lock', [owner, req.kind, String(req.leaseMs)]];
    const sent = await a.topo.routed(req.key, now() + a.topo.responseMs, (link) =>
      evalScript(link, name, [req.key], args),
    );
    const grant = (count: number): Grant => ({
      count,
      token: null,
      sentAt: sent.sentAt,
      link: null,
      epoch: 0,
      waited: false,
      server: sent.link.name,
    });
    const r = sent.reply;
    // The lock script answers nil on a grant.
    if (r === null || r === undefined) return grant(a.before + 1);
    if (typeof r === 'number') return r;
    const [flag, n] = (r as unknown[]).map(Number) as [number, number];
    if (flag === 1) return grant(n);
    if (flag === -1) {
      throw new CommandError(
        `${sent.link.name}: ERR semaphore capacity is ${n}, not ${req.capacity}`,
        sent.link.name,
      );
    }
    return n;
  }

  async acquire(a: Attempt): Promise<Grant | null> {
    const first = await this.tryOnce(a);
    if (typeof first !== 'number') return first;
    if (!a.wait || now() >= a.deadline) return null;
    let wake: () => void = () => {};
    const notify = (): void => wake();
    const channel = channelName(this.prefix, a.req.key);
    a.closed.throwIfAborted();
    const sub = await a.topo.subscriber().catch(() => null); // no pub/sub: poll
    const subscribed = await sub?.subscribe(channel, notify).then(
      () => true,
      () => false,
    );
    try {
      for (;;) {
        const r = await this.tryOnce(a); // after subscribing: an unlock before it is not missed
        if (typeof r !== 'number') return r;
        const until = Math.min(
          a.deadline - now(),
          r >= 0 ? r : Infinity,
          a.req.kind === 'semaphore' || !subscribed ? SCRIPT_POLL_MS : Infinity,
        );
        let timer: NodeJS.Timeout | undefined;
        const pause = new Promise<void>((resolve) => {
          wake = resolve;
          if (until !== Infinity) timer = setTimeout(resolve, Math.max(0, until));
        });
        await cutShort(pause, [a.signal, a.closed], Infinity, noLate, () => {}).finally(() =>
          clearTimeout(timer),
        );
        if (now() >= a.deadline) {
          const last = await this.tryOnce(a); // one last try, as Redisson's loop does
          return typeof last === 'number' ? null : last;
        }
      }
    } finally {
      // Not waited for: the wait is over whether or not the server answers.
      if (subscribed) sub!.unsubscribe(channel, notify).catch(() => {});
    }
  }

  renew(topo: Topology, e: Entry): Promise<Sent> {
    const name: ScriptName =
      e.kind === 'lock' ? 'renew' : e.kind === 'semaphore' ? 'sem_renew' : 'rw_renew';
    return topo.routed(e.key, now() + topo.responseMs, (link) =>
      evalScript(link, name, [e.key], [String(e.leaseMs), e.owner]),
    );
  }

  async release(topo: Topology, r: Release): Promise<Sent> {
    const { key, owner, kind, count, leaseMs } = r;
    const keys = [key, channelName(this.prefix, key)];
    const sent = await topo.routed(key, now() + topo.responseMs, (link) =>
      kind === 'lock'
        ? evalScript(link, 'unlock', keys, [UNLOCK_MESSAGE, String(leaseMs), owner])
        : kind === 'semaphore'
          ? evalScript(link, 'sem_release', keys, [owner, String(count), UNLOCK_MESSAGE])
          : evalScript(link, 'rw_unlock', keys, [owner, kind, UNLOCK_MESSAGE]),
    );
    if (Array.isArray(sent.reply) && Number(sent.reply[0]) === -1) {
      throw new CommandError(
        `${sent.link.name}: ERR COUNT ${count} is more than the ${sent.reply[1]} permits ` +
          'the owner holds',
        sent.link.name,
      );
    }
    return sent;
  }
}

const PROBE_KEY = 'dlock:probe';

/**
 * What the server's module can do, asked once when the backend is chosen (both questions in
 * one round trip): `module`, whether the server knows the module's commands (`DLOCK.INFO` on
 * a probe key: any answer but `unknown command` — WRONGTYPE, NOPERM — proves the command
 * exists), and `bind`, whether it takes `BIND` (a `DLOCK.RENEW ... BIND` of a hold nobody
 * has: it answers 0 and changes nothing; a module older than BIND answers a syntax or arity
 * error). `server`: where the probe key's commands went.
 */
async function probeModule(
  topo: Topology,
  owner: string,
): Promise<{ module: boolean; bind: boolean; server: string }> {
  const [info, renew] = await Promise.allSettled([
    topo.send(PROBE_KEY, ['DLOCK.INFO', PROBE_KEY]),
    topo.send(PROBE_KEY, renewCommand(PROBE_KEY, owner, 1, 1)),
  ]);
  if (info.status === 'rejected') {
    const text = replyText(info.reason);
    if (text === null) throw translate(info.reason, topo.name);
    if (/unknown command/i.test(text))
      return { module: false, bind: false, server: serverOf(info.reason, topo.name) };
  }
  const bind = renew.status === 'fulfilled' || !isUnknownOption(replyText(renew.reason));
  return {
    module: true,
    bind,
    server: info.status === 'fulfilled' ? info.value.link.name : serverOf(info.reason, topo.name),
  };
}

/** The `backend` option: `auto` picks native when the server has the module. */
export type BackendChoice = 'auto' | 'native' | 'script';

/**
 * The backend `choice` means on `topo` (asking the server once unless `script`): native,
 * binding holds with `bind` (none on a module older than BIND), else the scripts on
 * `channelPrefix`. `owner`: a fresh owner id for the probe's renewal.
 */
export async function chooseBackend(
  topo: Topology,
  choice: { backend: BackendChoice; bind: number | null; channelPrefix: string | undefined },
  owner: string,
): Promise<Backend> {
  const { backend, bind, channelPrefix } = choice;
  if (backend === 'script') return new Script(channelPrefix);
  const probe = await probeModule(topo, owner);
  // A module older than BIND: holds are not bound (they last their lease after a crash).
  if (probe.module) return new Native(probe.bind ? bind : null);
  if (backend === 'native') {
    throw new ModuleNotLoadedError(`dlock module not loaded on ${probe.server}`, probe.server);
  }
  reportFallback(probe.server);
  return new Script(channelPrefix);
}

/**
 * The first fallback to the scripts in this process is reported (once), as Node reports a
 * deprecation.
 */
let fallbackReported = false;
function reportFallback(server: string): void {
  if (fallbackReported) return;
  fallbackReported = true;
  process.emitWarning(
    `dlock module not loaded on ${server}: using the Lua script backend (no server-side FIFO ` +
      `queue, fencing, BIND or lock-delay). Pass backend: 'script' to choose it, or 'native' ` +
      `to refuse it.`,
    { type: 'DlockWarning', code: 'DLOCK_SCRIPT_FALLBACK' },
  );
}
