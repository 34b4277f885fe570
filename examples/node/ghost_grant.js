// The ghost grant: ioredis `commandTimeout` shorter than a WAIT, and the fix.
//
// Run against a Redis with the dlock module (`make run`):
//   node ghost_grant.js [PORT]         (or DLOCK_PORT=...; default 6379)
//
// Both cases send `DLOCK.ACQUIRE key owner 10000 WAIT 1500` while another owner holds the
// lock; the holder releases 0.7 s later.
//
// - bad:  `commandTimeout: 500`. After 0.5 s ioredis rejects the promise ("Command timed
//         out") but keeps the connection, so the waiter stays queued on the server. At the
//         release the server grants the lock to that owner: nobody is waiting for it, and it
//         sits idle for its whole lease unless the caller cleans up (disconnect, then
//         DLOCK.RELEASE with the same owner), as done here.
// - good: no commandTimeout on a dedicated connection: the caller gets the grant itself.
'use strict';

const Redis = require('ioredis');

const PORT = Number(process.argv[2] || process.env.DLOCK_PORT || 6379);
const KEY = 'examples:ioredis-ghost:orders';
const WAIT_MS = 1500;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// DLOCK.INFO as an object (ioredis speaks RESP2: a flat field/value array).
async function info(r) {
  const flat = await r.call('DLOCK.INFO', KEY);
  const out = {};
  for (let i = 0; i < flat.length; i += 2) out[flat[i]] = flat[i + 1];
  return out;
}

async function waitForWaiters(admin, n) {
  while ((await info(admin)).waiters !== n) await sleep(10);
}

async function scenario(label, options) {
  const admin = new Redis({ host: '127.0.0.1', port: PORT });
  await admin.del(KEY);
  await admin.call('DLOCK.ACQUIRE', KEY, 'holder', 30000);
  const waiter = new Redis({ host: '127.0.0.1', port: PORT, ...options });
  await waiter.ping(); // connected before the clock starts

  const start = Date.now();
  const call = waiter.call('DLOCK.ACQUIRE', KEY, label, 10000, 'WAIT', WAIT_MS).then(
    (reply) => ({ reply, secs: (Date.now() - start) / 1000 }),
    (err) => ({ error: err.message, secs: (Date.now() - start) / 1000 }),
  );
  await waitForWaiters(admin, 1);
  await sleep(700 - (Date.now() - start));
  const queued = (await info(admin)).waiters; // after the bad client's time-out
  await admin.call('DLOCK.RELEASE', KEY, 'holder');
  const outcome = await call;
  const holders = Object.keys(await admin.hgetall(KEY));
  const answer = outcome.error ? `error "${outcome.error}"` : `${outcome.reply}`;
  console.log(
    `${label}: caller got ${answer} after ${outcome.secs.toFixed(2)} s; ` +
      `waiters at 0.7 s=${queued}; after the release the lock is held by: ${holders.join(',') || 'nobody'}`,
  );
  if (outcome.error) {
    // What to do after a client-side time-out: drop the connection (a waiter still queued
    // leaves the queue), then release with the same owner (nil when nothing was granted).
    waiter.disconnect();
    console.log(`${label}: cleanup DLOCK.RELEASE answered ${await admin.call('DLOCK.RELEASE', KEY, label)}`);
  } else {
    console.log(`${label}: DLOCK.RELEASE answered ${await admin.call('DLOCK.RELEASE', KEY, label)}`);
    waiter.disconnect();
  }
  admin.disconnect();
}

async function main() {
  await scenario('bad', { commandTimeout: 500 });
  await scenario('good', { autoResendUnfulfilledCommands: false, retryStrategy: () => null });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
