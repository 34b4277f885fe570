// Redis Cluster (3 masters with the module): commands routed by key, a wait on a connection
// to the key's node that follows its key when the slot moves, renewals that follow it too.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, NotHeldError, WrongTypeError } from 'dlock-client';
import { Cluster, until } from './servers.mjs';

let cl;
let client;

/** `key`'s slot, its master, and the master `step` places on. */
async function moving(key, step) {
  const slot = await cl.slotOf(key);
  const from = await cl.ownerOf(slot);
  return { slot, from, to: (from + step) % cl.nodes.length };
}
let other;
before(async () => {
  cl = await Cluster.start(3);
  client = await Client.connectCluster(cl.urls);
  other = await Client.connectCluster(cl.urls);
});
after(async () => {
  await client?.close();
  await other?.close();
  await cl?.stop();
});

it('routes each key to its master', async () => {
  const keys = Array.from({ length: 12 }, (_, i) => `spread:${i}`);
  const owners = new Set(await Promise.all(keys.map(async (k) => cl.ownerOf(await cl.slotOf(k)))));
  assert.equal(owners.size, 3, 'the keys cover every master');
  const held = await Promise.all(
    keys.map((k) => client.lock(k, { fence: true }).acquire({ timeout: 0 })),
  );
  assert.ok(held.every((h) => h && h.token > 0));
  for (const [i, k] of keys.entries())
    assert.equal((await other.info(k)).holders[0].owner, held[i].owner);
  assert.deepEqual(
    await Promise.all(held.map((h) => h.release())),
    held.map(() => true),
  );
});

it("errors and holds name the node (host:port) the key's commands went to, not the cluster", async () => {
  const key = 'named:1';
  const node = cl.nodes[await cl.ownerOf(await cl.slotOf(key))];
  await cl.cmd(cl.nodes.indexOf(node), ['SET', key, 'x']);
  const err = await client
    .lock(key)
    .acquire({ timeout: 0 })
    .catch((e) => e);
  assert.ok(err instanceof WrongTypeError, String(err));
  assert.equal(err.server, node.address);
  assert.match(err.message, new RegExp(node.address.replace(/\./g, '\\.')));
  await cl.cmd(cl.nodes.indexOf(node), ['DEL', key]);
  const held = await client.lock(key).acquire({ timeout: 0 });
  assert.equal(held.server, node.address);
  await cl.cmd(cl.nodes.indexOf(node), ['DEL', key]); // taken away: the release finds nothing
  const lost = await held.release().catch((e) => e);
  assert.ok(lost instanceof NotHeldError && lost.reason === 'not_held', String(lost));
  assert.equal(lost.server, node.address);
});

it('a waiting acquire follows its key when the slot moves, within its one deadline', async () => {
  const key = 'moving:1';
  const { slot, from, to } = await moving(key, 1);
  const held = await client.lock(key, { lease: 20_000 }).acquire();
  const t0 = performance.now();
  const waiting = other.lock(key).acquire({ timeout: 15_000 });
  await until('queued on the old master', async () => (await other.waiters(key)).length === 1);
  await cl.moveSlot(slot, from, to);
  await until('queued on the new master', async () => {
    const rows = await cl.cmd(to, ['DLOCK.WAITERS', key]).catch(() => []);
    return rows.length === 1;
  });
  assert.equal((await other.info(key)).holders[0].owner, held.owner, 'the hold moved with the key');
  await held.release(); // follows MOVED to the new master
  const got = await waiting;
  assert.ok(got, 'granted by the new master');
  assert.ok(performance.now() - t0 < 15_000);
  assert.deepEqual(await cl.cmd(to, ['HGETALL', key]), [got.owner, '1']);
  await got.release();
});

it('the watchdog renews a hold whose key moved', async () => {
  const key = 'moving:2';
  const { slot, from, to } = await moving(key, 2);
  const held = await client.lock(key, { lease: 600 }).acquire();
  await cl.moveSlot(slot, from, to);
  await sleep(1500); // more than two leases: renewed on the new master
  assert.equal(held.lost.aborted, false, String(held.lost.reason));
  assert.ok(Number(await cl.cmd(to, ['PTTL', key])) > 0);
  assert.equal(await held.release(), true);
});
