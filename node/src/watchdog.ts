/**
 * The one watchdog of a client: one timer for every hold, set for the earliest moment a hold
 * needs it (its renewal at a third of the lease, its deadline, its bound connection's sign of
 * life). Nothing it does can end in an unhandled rejection.
 */
import type { Backend } from './backend.js';
import { now } from './clock.js';
import { LostReason, replyText } from './errors.js';
import type { Entry } from './hold.js';
import type { Link, Sent } from './link.js';
import type { Topology } from './topology.js';

/**
 * What the watchdog needs of the holds it watches (holds.ts's `Holds` passes itself; this file does
 * not import holds.ts, which imports it).
 */
export interface Watched {
  readonly topo: Topology;
  readonly backend: Backend | null;
  all(): IterableIterator<Entry>;
  lose(e: Entry, reason: LostReason, cause?: unknown): void;
  /** What a renewal's answer did to `e`: false when it is gone. */
  renewed(e: Entry, sent: Sent): boolean;
}

export class Watchdog {
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private readonly lastPing = new Map<Link, number>();
  private stopped = false;

  constructor(private readonly holds: Watched) {}

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** How often a bound connection gets its sign of life (a PING), while holds are bound to it. */
  private pingEvery(graceMs: number): number {
    return Math.max(20, Math.min(1000, graceMs / 4));
  }

  /** Wake by the time `e` needs it (or reschedule for every entry). */
  schedule(e?: Entry): void {
    if (this.stopped) return;
    let at = Infinity;
    if (e) at = this.wakeFor(e);
    else for (const x of this.holds.all()) at = Math.min(at, this.wakeFor(x));
    if (at === Infinity || (this.timer && at >= this.timerAt)) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => this.tick(), Math.max(0, at - now()));
    this.timer.unref();
  }

  /** When `e` needs a look: its renewal, its deadline, its connection's ping. */
  private wakeFor(e: Entry): number {
    const at = Math.min(e.nextDue, e.deadlineAt());
    return e.bound
      ? Math.min(
          at,
          (this.lastPing.get(e.bound.link) ?? -Infinity) + this.pingEvery(e.bound.graceMs),
        )
      : at;
  }

  private tick(): void {
    this.timer = null;
    this.timerAt = Infinity;
    const t = now();
    const pings = new Map<Link, number>();
    for (const e of [...this.holds.all()]) {
      if (t >= e.deadlineAt()) {
        this.holds.lose(e, 'lease_expired');
        continue;
      }
      // A bound connection that closed since: renew now, which rebinds the hold to the
      // connection that answers.
      const rebind = e.bound !== null && e.bound.link.currentEpoch !== e.bound.epoch;
      if (!e.renewing && (e.nextDue <= t || rebind)) this.renew(e);
      if (e.bound)
        pings.set(
          e.bound.link,
          Math.min(pings.get(e.bound.link) ?? Infinity, this.pingEvery(e.bound.graceMs)),
        );
    }
    for (const [link, every] of pings) {
      if (t - (this.lastPing.get(link) ?? -Infinity) >= every) {
        this.lastPing.set(link, t);
        link.send(['PING']).catch(() => {}); // its answer moves link.knownOpen
      }
    }
    this.schedule();
  }

  /**
   * Renewals of one tick are sent together: node-redis writes them in one batch. Each is
   * bounded by the response time-out; one that fails is tried again soon while the lease lasts.
   */
  private renew(e: Entry): void {
    e.renewing = true;
    this.holds
      .backend!.renew(this.holds.topo, e)
      .then(
        (sent) => void this.holds.renewed(e, sent),
        (err) => {
          if (e.gone) return;
          if (replyText(err)?.startsWith('WRONGTYPE')) this.holds.lose(e, 'not_held', err);
          else e.nextDue = now() + Math.min(e.leaseMs / 10, 250); // unreachable: try again soon
        },
      )
      .catch(() => {})
      .finally(() => {
        e.renewing = false;
        this.schedule();
      });
  }
}
