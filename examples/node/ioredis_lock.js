// dlock from ioredis: wait, watchdog, fencing token, release.
//
// Run against a Redis with the dlock module (`make run`):
//   node ioredis_lock.js [PORT]        (or DLOCK_PORT=...; default 6379)
//
// The rules it follows (docs/CLIENTS.md explains each one):
// 1. A blocking WAIT gets its own connection: a blocked reply stalls every other command
//    sent on the same connection.
// 2. That connection has no `commandTimeout` shorter than the WAIT: ioredis rejects the
//    promise but leaves the command queued on the server, which later grants the lock to
//    an owner nobody waits for (examples/node/ghost_grant.js shows it).
// 3. No automatic re-send: `autoResendUnfulfilledCommands: false` and no reconnect, so a
//    dropped WAIT is not queued again behind the caller's back.
// 4. After the caller gives up (its own timer) or an error: disconnect that connection (the
//    server drops the waiter) and DLOCK.RELEASE with the same owner, in case the grant was
//    made just before. Or let the lease expire.
// 5. A watchdog renews the lease (DLOCK.RENEW) and says when the lock is lost.
// 6. The fencing token goes with every write to the protected resource.
'use strict';

const crypto = require('node:crypto');
const { watchdog } = require('./watchdog');
const Redis = require('ioredis');

const PORT = Number(process.argv[2] || process.env.DLOCK_PORT || 6379);
const KEY = 'examples:ioredis:orders';
const LEASE_MS = 2000; // short for the demo; in production 10-30 s

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A dedicated connection for one blocking DLOCK.ACQUIRE ... WAIT.
function waitingConnection() {
  return new Redis({
    host: '127.0.0.1',
    port: PORT,
    // no commandTimeout: the server answers within the WAIT
    autoResendUnfulfilledCommands: false, // never re-send a WAIT after a reconnect
    retryStrategy: () => null, // and do not reconnect: this connection serves one call
    maxRetriesPerRequest: 0,
  });
}

// DLOCK.ACQUIRE key owner lease WAIT waitMs FENCE -> fencing token, or null (timed out).
async function acquire(shared, owner, waitMs) {
  const conn = waitingConnection();
  let timer;
  const giveUp = new Promise((_, reject) => {
    // The caller's own bound, a little longer than the server's.
    timer = setTimeout(() => reject(new Error('client-side time-out')), waitMs + 5000);
  });
  try {
    const reply = await Promise.race([
      conn.call('DLOCK.ACQUIRE', KEY, owner, LEASE_MS, 'WAIT', waitMs, 'FENCE'),
      giveUp,
    ]);
    return reply === null ? null : reply[1];
  } catch (err) {
    conn.disconnect(); // takes the waiter out of the server's queue
    await shared.call('DLOCK.RELEASE', KEY, owner); // a grant made just before is ours
    throw err;
  } finally {
    clearTimeout(timer);
    conn.disconnect();
  }
}

// Stands for the resource the lock protects: it refuses writes with an older token.
const store = {
  highest: 0,
  write(token) {
    if (token < this.highest) return false;
    this.highest = token;
    return true;
  },
};

async function main() {
  const shared = new Redis({ host: '127.0.0.1', port: PORT });
  await shared.del(KEY);
  const me = `${crypto.randomBytes(16).toString('hex')}:1`;
  const other = `${crypto.randomBytes(16).toString('hex')}:1`;

  const token = await acquire(shared, me, 2000);
  console.log(`acquired token=${token}`);
  const dog = watchdog(() => shared.call('DLOCK.RENEW', KEY, me, LEASE_MS), LEASE_MS);
  await sleep(1.5 * LEASE_MS); // the work: longer than one lease
  const held = (await shared.hget(KEY, me)) !== null && !dog.lost;
  console.log(`still held after 1.5 leases: ${held ? 'yes' : 'no'} (renewals=${dog.renewals})`);

  console.log(`contender WAIT 300: ${(await acquire(shared, other, 300)) ?? 'nil'}`);

  dog.stop();
  console.log(`released=${await shared.call('DLOCK.RELEASE', KEY, me)}`);

  const token2 = await acquire(shared, other, 2000);
  console.log(`contender acquired token=${token2}`);
  console.log(`write with token ${token2}: ${store.write(token2) ? 'accepted' : 'refused'}`);
  // A late write from the first holder (e.g. after a long pause) carries the older token.
  console.log(`late write with token ${token}: ${store.write(token) ? 'accepted' : 'refused'}`);
  console.log(`contender released=${await shared.call('DLOCK.RELEASE', KEY, other)}`);

  // The server stops answering (CLIENT PAUSE stands for a dead or hung server): the renewals
  // hang, and the watchdog says the lock is lost once the lease has run out.
  await acquire(shared, me, 2000);
  const dog2 = watchdog(() => shared.call('DLOCK.RENEW', KEY, me, LEASE_MS), LEASE_MS);
  const admin = new Redis({ host: '127.0.0.1', port: PORT });
  await admin.call('CLIENT', 'PAUSE', 3 * LEASE_MS, 'WRITE');
  const pausedAt = Date.now();
  while (!dog2.lost && Date.now() - pausedAt < 3 * LEASE_MS) await sleep(10);
  const secs = ((Date.now() - pausedAt) / 1000).toFixed(1);
  console.log(`server unreachable: lost=${dog2.lost ? 'yes' : 'no'} after ${secs} s (lease ${LEASE_MS / 1000} s)`);
  dog2.stop();
  await admin.call('CLIENT', 'UNPAUSE');
  await shared.call('DLOCK.RELEASE', KEY, me);
  admin.disconnect();
  shared.disconnect();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
