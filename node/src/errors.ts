/**
 * The errors of dlock-client. Every one is a {@link DlockError}, names the server the failing
 * command went to (`server`, also in the message) and keeps what caused it as `cause`.
 */

export class DlockError extends Error {
  /** `host:port` of the server (or `cluster`, `sentinel service NAME`). */
  readonly server: string;
  constructor(message: string, server: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.server = server;
  }
}

/** The server answered `unknown command`: the dlock module is not loaded there. */
export class ModuleNotLoadedError extends DlockError {}

/** The server could not be reached, or the connection closed under the command. */
export class ServerConnectionError extends DlockError {}

/** The key holds a value that is not a lock of the requested kind (`WRONGTYPE`). */
export class WrongTypeError extends DlockError {}

/**
 * The server refused a wait that would close a cycle of owners waiting for each other; the
 * request changed nothing. `cycle`: `<owner> waits for <key> held by <owner>, ...`.
 */
export class DeadlockError extends DlockError {
  get cycle(): string {
    const at = this.message.indexOf('DEADLOCK ');
    return at < 0 ? this.message : this.message.slice(at + 'DEADLOCK '.length);
  }
}

/**
 * Why a hold is no longer held: the `reason` of a {@link LostError}. The values are the
 * conformance suite's names, the same in every dlock client (docs/CLIENTS.md).
 */
export type LostReason =
  /**
   * The server says this owner does not hold it (a renewal or release answered 0/nil,
   * WRONGTYPE).
   */
  | 'not_held'
  /**
   * The client's deadline passed: no renewal was confirmed before the lease ran out (counted
   * from its send time), or the connection the hold is bound to (BIND) was not known open
   * within the grace.
   */
  | 'lease_expired'
  /** This hold was released (`release()`): what a second release rejects with. */
  | 'released'
  /** The client was closed while it held it (close releases nothing; nothing renews it). */
  | 'closed';

/** A hold that is no longer held: the `reason` of `held.lost`. */
export class LostError extends DlockError {
  readonly reason: LostReason;
  readonly key: string;
  constructor(key: string, reason: LostReason, server: string, options?: { cause?: unknown }) {
    super(`lock ${JSON.stringify(key)} on ${server} is no longer held: ${reason}`, server, options);
    this.reason = reason;
    this.key = key;
  }
}

/**
 * `release()` or `renew()` of a hold that is no longer held: released already (`reason`
 * `'released'`) or lost (the loss's reason). As redis-py's `LockNotOwnedError` and Redisson's
 * `IllegalMonitorStateException`; a {@link LostError}, so code written for 0.1's
 * `LostError` still catches it.
 */
export class NotHeldError extends LostError {}

/**
 * The client was closed: every call after `close()`, and every wait or command still pending
 * when it was called (as node-redis's `ClientClosedError`).
 */
export class ClosedError extends DlockError {}

/**
 * A command got no answer within the client's `responseTimeout` (the server hangs, or the
 * network dropped without a reset). A {@link ServerConnectionError}.
 */
export class ResponseTimeoutError extends ServerConnectionError {
  /** `server` did not answer `what` within `ms` (the client's `responseTimeout`). */
  static of(
    server: string,
    what: 'connect' | 'answer' | 'answer after the wait',
    ms: number,
  ): ResponseTimeoutError {
    const did = what === 'connect' ? `cannot connect to ${server}` : `no answer from ${server}`;
    const after = what === 'answer after the wait' ? " after the wait's end" : '';
    return new ResponseTimeoutError(`${did} within ${ms} ms${after} (responseTimeout)`, server);
  }
}

/** An option this backend or module does not have (e.g. `lockDelay` on the script backend). */
export class NotSupportedError extends DlockError {}

/** An argument refused where it was given (a lease of 0, a lock-delay over 60 s, ...). */
export class ConfigError extends DlockError {
  constructor(message: string) {
    super(message, '');
  }
}

/** `using()` could not acquire within its `timeout`. */
export class AcquireTimeoutError extends DlockError {}

/** A cluster redirect could not be followed within the wait (too many, or TRYAGAIN to the end). */
export class RedirectError extends DlockError {}

/** Any other error reply (`ERR ...`: a full queue, a capacity mismatch, ...). */
export class CommandError extends DlockError {}

/** The text of a server's error reply, or null when `err` is not one (node-redis `ErrorReply`). */
export function replyText(err: unknown): string | null {
  if (err instanceof Error) {
    for (let c: object | null = Object.getPrototypeOf(err); c; c = Object.getPrototypeOf(c)) {
      if ((c as { constructor?: { name?: string } }).constructor?.name === 'ErrorReply')
        return err.message;
    }
  }
  return null;
}

/**
 * The server each failed command went to, noted by the connection that sent it (a cluster's
 * errors then name the node, not the cluster). A WeakMap: node-redis's error objects stay as
 * they are (the redirect rules read them), and nothing is kept after they are gone.
 */
const failedOn = new WeakMap<object, string>();

/** Note that `err` came from the command sent to `server`. */
export function noteServer(err: unknown, server: string): void {
  if (typeof err === 'object' && err !== null && !failedOn.has(err)) failedOn.set(err, server);
}

/** The server `err` came from when a connection noted it, else `fallback`. */
export function serverOf(err: unknown, fallback: string): string {
  return (typeof err === 'object' && err !== null && failedOn.get(err)) || fallback;
}

/**
 * node-redis' error as this package's, naming the server the command went to (`server` when
 * the error does not say: a command that never reached a connection); ours pass through.
 */
export function translate(err: unknown, fallback: string): DlockError {
  if (err instanceof DlockError) return err;
  const server = serverOf(err, fallback);
  const text = replyText(err);
  if (text === null) {
    const msg = err instanceof Error ? err.message : String(err);
    return new ServerConnectionError(`cannot reach ${server}: ${msg}`, server, { cause: err });
  }
  if (/^ERR unknown command/i.test(text) && /dlock\./i.test(text)) {
    return new ModuleNotLoadedError(`dlock module not loaded on ${server}`, server, { cause: err });
  }
  if (text.startsWith('WRONGTYPE'))
    return new WrongTypeError(`${server}: ${text}`, server, { cause: err });
  if (text.startsWith('DEADLOCK '))
    return new DeadlockError(`${server}: ${text}`, server, { cause: err });
  return new CommandError(`${server}: ${text}`, server, { cause: err });
}
