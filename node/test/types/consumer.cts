// A TypeScript user's file compiled as CommonJS: the `require` side of the exports map has
// its own declarations (dist/cjs); consumer.mts checks the whole API on the `import` side.
import { Client, DlockError, Held, LostError } from 'dlock-client';

export async function demoCjs(): Promise<boolean> {
  const client = await Client.connect('redis://127.0.0.1:6379', { bind: null, backend: 'script' });
  const held: Held | null = await client.lock('job', { lease: 10_000 }).acquire({ timeout: 0 });
  // @ts-expect-error owner is a string id
  await client.lock('job').acquire({ owner: 7 });
  const reason = held?.lost.reason instanceof LostError ? held.lost.reason.reason : null;
  await client.close();
  return held !== null && reason === null && !(held.lost.reason instanceof DlockError);
}
