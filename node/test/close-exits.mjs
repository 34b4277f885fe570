// A program a user would write, run by faults.test.mjs in its own process: it must end by
// itself (no process.exit) once the client is closed or refused.
//   node close-exits.mjs URL waiters   8 workers x 5 acquires on one lock, then close()
//   node close-exits.mjs URL bogus     Client.connect with { backend: 'bogus' }, refused
//   node close-exits.mjs URL bind      Client.connect with { bind: -1 }, refused
import { Client, ClosedError, ConfigError } from 'dlock-client';

const [url, mode] = process.argv.slice(2);

if (mode === 'waiters') {
  // A first client: the fallback is reported once for both.
  await (await Client.connect(url)).close();
  const client = await Client.connect(url);
  const held = await client.lock('exits').acquire();
  const waits = [];
  for (let w = 0; w < 8; w++) {
    waits.push(
      (async () => {
        for (let i = 0; i < 5; i++) {
          const h = await client.lock('exits').acquire({ timeout: 60_000 });
          await h?.release();
        }
      })(),
    );
  }
  // Every worker waiting (subscribed, on the script backend).
  await new Promise((r) => setTimeout(r, 300));
  await client.close();
  const ends = await Promise.allSettled(waits);
  const closed = ends.filter(
    (e) => e.status === 'rejected' && e.reason instanceof ClosedError,
  ).length;
  console.log(JSON.stringify({ closed, lostReason: held.lostReason, native: client.native }));
} else {
  const opts = mode === 'bogus' ? { backend: 'bogus' } : { bind: -1 };
  const err = await Client.connect(url, opts).catch((e) => e);
  console.log(JSON.stringify({ config: err instanceof ConfigError }));
}
