// A TypeScript user's file (ESM), checked with `tsc --strict --noEmit`: the declarations let
// this compile, and the @ts-expect-error lines prove they refuse what they should.
import { createClient, createCluster } from 'redis';
import { Client, DeadlockError, DlockError, Held, LockInfo, LostError, Waiter } from 'dlock-client';

export async function demo(signal: AbortSignal): Promise<number | null> {
  const client = await Client.connect('redis://127.0.0.1:6379', { bind: 2000 });
  const mine = new Client(createClient({ url: 'redis://127.0.0.1:6379' }), { backend: 'auto' });
  const cluster = new Client(createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] }));
  const lock = client.lock('invoice:7', { lease: 30_000, fence: true });
  const held: Held | null = await lock.acquire({ timeout: 5_000, signal });
  const waited: Held = await lock.acquire({ signal }); // no time-out: a hold, never null
  const permits: Held = await client.semaphore('pool', { capacity: 3 }).acquire({ count: 2 });
  // @ts-expect-error with a time-out the hold may be null
  const maybe: Held = await lock.acquire({ timeout: 1 });
  if (!held) return null;
  // @ts-expect-error internals are not in the declarations
  held.released = true;
  // @ts-expect-error internals are not in the declarations
  void held.entry;
  // @ts-expect-error a hold is made by acquire(), not by hand
  new Held();
  const reason: 'not_held' | 'lease_expired' | 'released' | 'closed' | null = held.lostReason;
  console.log(waited, permits, maybe, reason);
  const token: number | null = held.token;
  const count: number = held.count;
  const lost: AbortSignal = held.lost;
  if (lost.aborted && lost.reason instanceof LostError) console.log(lost.reason.reason);
  const freed: boolean = await held.release();
  await client.using('invoice:7', { lease: 30_000, timeout: 5_000 }, async (h) => h.token);
  await client.rwlock('doc', { lease: 30_000 }).read().acquire({ timeout: 1_000 });
  await client
    .semaphore('pool', { capacity: 10, lease: 30_000 })
    .acquire({ count: 2, timeout: 1_000 });
  const w: Waiter[] = await client.waiters('invoice:7');
  const i: LockInfo = await client.info('invoice:7');
  try {
    await lock.acquire();
  } catch (e) {
    if (e instanceof DeadlockError) console.log(e.cycle, e.server);
    else if (e instanceof DlockError) console.log(e.cause);
  }
  // @ts-expect-error leases are milliseconds as numbers
  client.lock('x', { lease: '30s' });
  // @ts-expect-error a semaphore needs its capacity
  client.semaphore('x', {});
  // @ts-expect-error token is not writable
  held.token = 1;
  await Promise.all([client.close(), mine.close(), cluster.close()]);
  return (token ?? 0) + count + w.length + i.holders.length + (freed ? 1 : 0);
}
