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
  if (!held) return null;
  const token: number | null = held.token;
  const count: number = held.count;
  const lost: AbortSignal = held.lost;
  if (lost.aborted && lost.reason instanceof LostError) console.log(lost.reason.reason);
  const freed: boolean = await held.release();
  await client.using('invoice:7', { lease: 30_000, timeout: 5_000 }, async (h) => h.token);
  await client.rwlock('doc', { lease: 30_000 }).read().acquire({ timeout: 1_000 });
  await client.semaphore('pool', { capacity: 10, lease: 30_000 }).acquire({ count: 2, timeout: 1_000 });
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
