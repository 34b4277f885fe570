// dlock-client, the Node package in node/ (npm name dlock-client): the rules of
// docs/CLIENTS.md are built in. Usage: node dlock_client.mjs [port]
import { Client } from 'dlock-client';

const PORT = Number(process.argv[2] ?? process.env.DLOCK_PORT ?? 6379);
const KEY = 'invoice:7';

const client = await Client.connect(`redis://127.0.0.1:${PORT}`); // BIND (a 2 s grace) by default
const lock = client.lock(KEY, { lease: 30_000, fence: true }); // milliseconds; the watchdog renews

const held = await lock.acquire({ timeout: 5_000 }); // FIFO wait in the server; null on time-out
if (!held) throw new Error(`${KEY} not granted within 5 s`);
console.log(`acquired token=${held.token}`);
const other = await lock.acquire({ timeout: 300 }); // every acquire is its own owner
console.log(`contender within 300 ms: ${other}`);

const waiting = lock.acquire(); // queued in the server; no time-out: the hold, never null
console.log(`released=${await held.release()}`);
const next = await waiting; // handed over at the release
console.log(`contender acquired token=${next.token} lost=${next.lost.aborted}`);

const ctrl = new AbortController();
const cancelled = lock.acquire({ signal: ctrl.signal });
setTimeout(() => ctrl.abort(), 100);
try {
  await cancelled;
} catch (err) {
  // The waiting connection is closed: nothing is left queued or held.
  console.log(`cancelled: ${err instanceof Error ? err.name : err}; waiters=${(await client.waiters(KEY)).length}`);
}
await next.release();

await client.using(KEY, { lease: 10_000, timeout: 1_000 }, async (h) => {
  console.log(`using: count=${h.count} lost=${h.lost.aborted}`);
});
await client.close();
