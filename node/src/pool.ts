/**
 * The pool of dedicated connections for the native backend's waits, one per server (kept by
 * the topology beside that server's {@link Link}).
 */
import { ResponseTimeoutError } from './errors.js';
import { NodeRedisClient, destroy, within } from './link.js';

/**
 * Dedicated connections for blocking WAITs, one per waiting acquire, kept idle for reuse
 * (up to `max`). They never reconnect and never queue commands while offline, so a WAIT is
 * never sent twice; a wait cut short destroys its connection (the server drops the waiter).
 */
export class WaitPool {
  private readonly idle: NodeRedisClient[] = [];
  private readonly busy = new Set<NodeRedisClient>();
  private closed = false;

  constructor(
    private readonly base: NodeRedisClient,
    private readonly name: string,
    private readonly max = 16,
  ) {}

  /**
   * An open connection, made within `ms` when none is idle (a server that hangs: a
   * {@link ResponseTimeoutError}).
   */
  async take(ms: number): Promise<NodeRedisClient> {
    const ready = this.idle.pop();
    if (ready?.isOpen) {
      this.busy.add(ready);
      return ready;
    }
    const socket = { ...(this.base.options?.socket ?? {}), reconnectStrategy: false };
    const conn = this.base.duplicate({
      socket,
      disableOfflineQueue: true,
      pingInterval: undefined,
    });
    conn.on('error', () => {}); // surfaces as the WAIT's rejection
    this.busy.add(conn);
    try {
      await within(
        conn.connect(),
        ms,
        () => ResponseTimeoutError.of(this.name, 'connect', ms),
        () => destroy(conn),
      );
    } catch (err) {
      this.busy.delete(conn);
      destroy(conn);
      throw err;
    }
    if (this.closed) {
      this.drop(conn);
      throw new Error('closed'); // the caller reports the client closed
    }
    return conn;
  }

  give(conn: NodeRedisClient): void {
    this.busy.delete(conn);
    if (!this.closed && conn.isOpen && this.idle.length < this.max) this.idle.push(conn);
    else destroy(conn);
  }

  drop(conn: NodeRedisClient): void {
    this.busy.delete(conn);
    destroy(conn);
  }

  close(): void {
    this.closed = true;
    for (const c of [...this.idle, ...this.busy]) destroy(c);
    this.idle.length = 0;
    this.busy.clear();
  }
}
