// Every scenario of the conformance suite (conformance/scenarios) through this package's
// driver, by the suite's runner binary. A missing runner or scenario folder fails: the
// suite is what holds this client to the contract, so it is never skipped.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REPO } from './servers.mjs';

const RUNNER = process.env.DLOCK_CONFORMANCE ?? join(REPO, 'target', 'release', 'dlock-conformance');
const SCENARIOS = join(REPO, 'conformance', 'scenarios');
const DRIVER = `${process.execPath} node/test/conformance-driver.mjs`;

test('the conformance runner and scenarios are there', () => {
  assert.ok(existsSync(RUNNER), `${RUNNER} missing: run \`cargo build --release -p dlock-conformance\``);
  assert.ok(existsSync(SCENARIOS), `${SCENARIOS} missing`);
  assert.ok(readdirSync(SCENARIOS).some((f) => f.endsWith('.json')), 'no scenario in conformance/scenarios');
});

const files = existsSync(SCENARIOS) ? readdirSync(SCENARIOS).filter((f) => f.endsWith('.json')).sort() : [];
for (const file of files) {
  test(`scenario ${file}`, { skip: !existsSync(RUNNER) && 'runner missing (failed above)' }, () => {
    const r = spawnSync(RUNNER, ['--driver', DRIVER, join(SCENARIOS, file)], { cwd: REPO, encoding: 'utf8', timeout: 300_000 });
    const out = `${r.stdout}\n${r.stderr}`;
    process.stdout.write(r.stdout.split('\n').filter((l) => /pass|fail|skip|overlap/i.test(l)).map((l) => `# ${l}\n`).join(''));
    assert.equal(r.status, 0, `runner failed on ${file}:\n${out.slice(-4000)}`);
  });
}
