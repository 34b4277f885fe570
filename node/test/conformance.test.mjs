// Every scenario of the conformance suite (conformance/scenarios) through this package's
// driver, by the suite's runner (`dlock-conformance`, built by `make test-node`). A missing
// runner fails: the suite is what holds this client to the contract, so it is never skipped.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { REPO } from './servers.mjs';

const RUNNER =
  process.env.DLOCK_CONFORMANCE ?? join(REPO, 'target', 'release', 'dlock-conformance');
const SCENARIOS = join(REPO, 'conformance', 'scenarios');
// This folder's own driver (a copy of the package, scripts/test-peer.sh, tests itself).
const DRIVER = `${process.execPath} ${join(dirname(fileURLToPath(import.meta.url)), 'conformance-driver.mjs')}`;

test('every conformance scenario passes with the Node driver', { timeout: 1_200_000 }, () => {
  assert.ok(
    existsSync(RUNNER),
    `${RUNNER} missing: run \`cargo build --release -p dlock-conformance\``,
  );
  assert.ok(existsSync(SCENARIOS), `${SCENARIOS} missing`);
  const args = [
    '--driver',
    DRIVER,
    '--client',
    'node',
    '--jobs',
    '2',
    ...(process.env.DLOCK_SCENARIO ? ['--only', process.env.DLOCK_SCENARIO] : []),
    SCENARIOS,
  ];
  const r = spawnSync(RUNNER, args, {
    cwd: REPO,
    encoding: 'utf8',
    timeout: 1_100_000,
    maxBuffer: 64 << 20,
  });
  // The runner's report (scenarios passed, failed, skipped; the longest overlap) goes to the log.
  for (const line of r.stdout.split('\n')) if (line.trim()) console.log(`# ${line}`);
  assert.equal(r.error, undefined, String(r.error));
  assert.equal(
    r.status,
    0,
    `the runner reported failures:\n${r.stdout.slice(-6000)}\n${r.stderr.slice(-6000)}`,
  );
});
