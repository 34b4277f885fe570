// dlock from node-redis (the `redis` package): wait, watchdog, fencing token, release.
//
// Run against a Redis with the dlock module (`make run`):
//   node node_redis_lock.js [PORT]     (or DLOCK_PORT=...; default 6379)
//
// The rules (docs/CLIENTS.md):
// 1. A blocking WAIT goes on its own connection, `client.duplicate()`: a blocked reply
//    stalls every other command sent on the same connection.
// 2. No `socket.socketTimeout` and no per-command `timeout` shorter than the WAIT: the
//    per-command `timeout` rejects the promise but leaves the waiter queued on the server,
//    which may later grant the lock to an owner nobody waits for.
// 3. `reconnectStrategy: false` on that connection: a dropped WAIT is not queued again.
// 4. After the caller gives up or an error: destroy that connection (the server drops the
//    waiter) and DLOCK.RELEASE with the same owner, in case the grant was made just before.
// 5. A watchdog renews the lease (DLOCK.RENEW) and says when the lock is lost.
// 6. The fencing token goes with every write to the protected resource.
'use strict';

const crypto = require('node:crypto');
const { watchdog } = require('./watchdog');
const { createClient } = require('redis');

const PORT = Number(process.argv[2] || process.env.DLOCK_PORT || 6379);
const KEY = 'examples:node-redis:orders';
const LEASE_MS = 2000; // short for the demo; in production 10-30 s

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// DLOCK.ACQUIRE key owner lease WAIT waitMs FENCE -> fencing token, or null (timed out).
async function acquire(shared, owner, waitMs) {
  // A dedicated connection with the shared client's settings, except reconnection.
  const conn = shared.duplicate({ socket: { host: '127.0.0.1', port: PORT, reconnectStrategy: false } });
  conn.on('error', () => {}); // errors surface as the command's rejection below
  await conn.connect();
  let timer;
  const giveUp = new Promise((_, reject) => {
    // The caller's own bound, a little longer than the server's.
    timer = setTimeout(() => reject(new Error('client-side time-out')), waitMs + 5000);
  });
  try {
    const args = ['DLOCK.ACQUIRE', KEY, owner, String(LEASE_MS), 'WAIT', String(waitMs), 'FENCE'];
    const reply = await Promise.race([conn.sendCommand(args), giveUp]);
    return reply === null ? null : reply[1];
  } catch (err) {
    conn.destroy(); // takes the waiter out of the server's queue
    await shared.sendCommand(['DLOCK.RELEASE', KEY, owner]); // a grant made just before is ours
    throw err;
  } finally {
    clearTimeout(timer);
    if (conn.isOpen) conn.destroy();
  }
}

async function main() {
  const shared = createClient({ socket: { host: '127.0.0.1', port: PORT } });
  await shared.connect();
  await shared.del(KEY);
  const me = `${crypto.randomBytes(16).toString('hex')}:1`;
  const other = `${crypto.randomBytes(16).toString('hex')}:1`;

  const token = await acquire(shared, me, 2000);
  console.log(`acquired token=${token}`);
  const dog = watchdog(() => shared.sendCommand(['DLOCK.RENEW', KEY, me, String(LEASE_MS)]), LEASE_MS);
  await sleep(1.5 * LEASE_MS); // the work: longer than one lease
  const held = (await shared.hGet(KEY, me)) != null && !dog.lost;
  console.log(`still held after 1.5 leases: ${held ? 'yes' : 'no'} (renewals=${dog.renewals})`);

  console.log(`contender WAIT 300: ${(await acquire(shared, other, 300)) ?? 'nil'}`);

  dog.stop();
  console.log(`released=${await shared.sendCommand(['DLOCK.RELEASE', KEY, me])}`);

  const token2 = await acquire(shared, other, 2000);
  console.log(`contender acquired token=${token2}`);
  console.log(`contender released=${await shared.sendCommand(['DLOCK.RELEASE', KEY, other])}`);
  shared.destroy();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
