/**
 * Every hold a client has, one {@link Entry} per (kind, owner, key): registering a grant,
 * releasing and renewing at the caller's request, and losing holds (the contract's deadline
 * rule, read through {@link Entry.deadline}). The {@link Watchdog} renews them.
 */
import type { Backend, Grant } from './backend.js';
import { now } from './clock.js';
import { ClosedError, LostReason, NotHeldError, translate } from './errors.js';
import { Binding, Entry, Held, HoldOwner } from './hold.js';
import type { Sent } from './link.js';
import type { Kind, Request } from './protocol.js';
import type { Topology } from './topology.js';
import { Watched, Watchdog } from './watchdog.js';

export class Holds implements HoldOwner, Watched {
  private readonly entries = new Map<string, Entry>();
  /** Lost holds whose release gave them back already (it is sent once). */
  private readonly givenBack = new WeakSet<Held>();
  readonly watchdog: Watchdog;
  /** Known once the client picked it (before any hold exists). */
  backend: Backend | null = null;
  /** Set by close(): every later call fails with it. */
  closedBy: (() => ClosedError) | null = null;

  constructor(readonly topo: Topology) {
    this.watchdog = new Watchdog(this);
  }

  static entryKey(key: string, owner: string, kind: Kind): string {
    return `${kind}\0${owner}\0${key}`;
  }

  all(): IterableIterator<Entry> {
    return this.entries.values();
  }

  /** What the entry `id` (kind, owner, key) holds by this client's count (holds, or permits). */
  heldCount(id: string): number {
    const e = this.entries.get(id);
    if (!e || e.gone) return 0;
    let n = 0;
    for (const h of e.holds) n += h.permits;
    return n;
  }

  register(id: string, req: Request, owner: string, grant: Grant, fresh: boolean): Held {
    const backend = this.backend!;
    let e = fresh ? undefined : this.entries.get(id);
    if (e) {
      this.checkDeadline(e);
      e = this.entries.get(id);
    }
    const bound: Binding | null =
      grant.link && backend.bindMs !== null
        ? { link: grant.link, epoch: grant.epoch, graceMs: Math.min(backend.bindMs, req.leaseMs) }
        : null;
    if (!e) {
      e = new Entry(id, req.key, owner, req.kind, req.leaseMs, 0, bound);
      this.entries.set(id, e);
    }
    e.set(grant.sentAt, req.leaseMs, bound);
    const held = Held.make(
      this,
      e,
      grant.count,
      grant.token,
      req.kind === 'semaphore' ? req.count : 1,
      grant.server,
    );
    e.holds.push(held);
    this.watchdog.schedule(e);
    return held;
  }

  checkDeadline(e: Entry): void {
    if (e.gone || e.deadlineAt() > now()) return;
    this.lose(e, 'lease_expired');
  }

  lose(e: Entry, reason: LostReason, cause?: unknown): void {
    e.gone = true;
    if (this.entries.get(e.id) === e) this.entries.delete(e.id);
    for (const h of e.holds) h.lose(reason, cause);
  }

  /** Close: every hold is lost (`closed`), the watchdog stops; nothing is released. */
  close(closedBy: () => ClosedError): void {
    this.closedBy = closedBy;
    this.watchdog.stop();
    for (const e of [...this.entries.values()]) this.lose(e, 'closed');
  }

  /** A hold's owner can no longer use it: why, as the error `release()` / `renew()` reject with. */
  private unusable(h: Held): Error | null {
    if (this.closedBy) return this.closedBy();
    const reason = h.lostReason;
    return reason === null ? null : new NotHeldError(h.key, reason, h.server);
  }

  /** The error of a command that failed: `closed` once the client is, else the package's. */
  private failed(err: unknown, server: string): Error {
    return this.closedBy ? this.closedBy() : translate(err, server);
  }

  async releaseHold(h: Held): Promise<boolean> {
    const refused = this.unusable(h);
    if (refused) {
      if (refused instanceof NotHeldError && refused.reason === 'lease_expired')
        await this.giveBackLost(h);
      throw refused;
    }
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
      reply = (await this.sendRelease(h)).reply;
    } catch (err) {
      throw this.failed(err, h.server);
    }
    if (reply === null || reply === undefined) {
      h.released = false; // it was not ours to release: lost, not released
      h.lose('not_held');
      h.released = true;
      throw new NotHeldError(h.key, 'not_held', h.server);
    }
    return Number(reply) === 1;
  }

  /**
   * A hold lost to its local deadline (`lease_expired`: the server could not be reached, or
   * the process paused) may still be held on the server: its release gives it back, once
   * (bounded by the response time-out; its answer changes nothing, the hold is lost). Not when
   * its owner holds the lock again through this client (a newer entry): a RELEASE would take
   * that hold.
   */
  private async giveBackLost(h: Held): Promise<void> {
    if (this.givenBack.has(h) || this.entries.has(h.entry.id)) return;
    this.givenBack.add(h);
    await this.sendRelease(h).catch(() => {});
  }

  /** The backend's release of `h` (its permits, on its entry's lease). */
  private sendRelease(h: Held): Promise<Sent> {
    const r = {
      key: h.key,
      owner: h.owner,
      kind: h.kind,
      count: h.permits,
      leaseMs: h.entry.leaseMs,
    };
    return this.backend!.release(this.topo, r);
  }

  async renewHold(h: Held): Promise<boolean> {
    const refused = this.unusable(h);
    if (refused) throw refused;
    const e = h.entry;
    let sent;
    try {
      sent = await this.backend!.renew(this.topo, e);
    } catch (err) {
      throw this.failed(err, h.server);
    }
    if (!this.renewed(e, sent)) throw new NotHeldError(h.key, h.lostReason ?? 'not_held', h.server);
    return true;
  }

  /** What a renewal answered at `sent.sentAt` did to `e`: false when it is gone. */
  renewed(e: Entry, sent: Sent): boolean {
    if (e.gone) return false;
    if (Number(sent.reply) !== 1) {
      this.lose(e, 'not_held');
      return false;
    }
    const b = this.backend!.bindMs;
    e.set(
      sent.sentAt,
      e.leaseMs,
      b === null
        ? undefined
        : { link: sent.link, epoch: sent.epoch, graceMs: Math.min(b, e.leaseMs) },
    );
    return true;
  }
}
