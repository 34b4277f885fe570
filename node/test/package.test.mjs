// The package as users get it: ESM and CommonJS entry points, type declarations checked by
// tsc --strict on a consumer file (both module kinds), and `npm pack` installed into an
// empty folder with nothing but its peer dependency.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const PKG = join(dirname(fileURLToPath(import.meta.url)), '..');
const NAMES = ['Client', 'DlockError', 'DeadlockError', 'LostError', 'ModuleNotLoadedError', 'ServerConnectionError', 'WrongTypeError'];

test('ESM entry point', async () => {
  const m = await import('dlock-client');
  for (const n of NAMES) assert.equal(typeof m[n], 'function', n);
  assert.equal(typeof m.default, 'undefined', 'named exports only');
});

test('CommonJS entry point', () => {
  const m = createRequire(import.meta.url)('dlock-client');
  for (const n of NAMES) assert.equal(typeof m[n], 'function', n);
  assert.ok(new m.ConfigError('x') instanceof m.DlockError);
});

test('types: tsc --strict on a consumer file, ESM and CommonJS', () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', join(PKG, 'test/types/tsconfig.json')], { encoding: 'utf8' });
  } catch (e) {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  }
});

test('npm pack installs into an empty folder with only redis beside it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'dlock-pack-'));
  try {
    const [{ filename, files }] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: PKG, encoding: 'utf8' }));
    const paths = files.map((f) => f.path);
    assert.ok(paths.includes('dist/esm/index.js') && paths.includes('dist/cjs/index.js') && paths.includes('dist/cjs/index.d.ts'));
    assert.ok(!paths.some((p) => p.startsWith('src/') || p.startsWith('test/')), 'no sources or tests shipped');
    const redisVersion = JSON.parse(readFileSync(join(PKG, 'node_modules/redis/package.json'), 'utf8')).version;
    writeFileSync(join(dir, 'package.json'), '{"name":"consumer","private":true}');
    execFileSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', join(dir, filename), `redis@${redisVersion}`], { cwd: dir, encoding: 'utf8' });
    const manifest = JSON.parse(readFileSync(join(dir, 'node_modules/dlock-client/package.json'), 'utf8'));
    assert.equal(manifest.dependencies, undefined, 'no runtime dependency but the peer');
    const esm = execFileSync(process.execPath, ['--input-type=module', '-e', "import { Client } from 'dlock-client'; console.log(typeof Client)"], { cwd: dir, encoding: 'utf8' });
    const cjs = execFileSync(process.execPath, ['-e', "console.log(typeof require('dlock-client').Client)"], { cwd: dir, encoding: 'utf8' });
    assert.deepEqual([esm.trim(), cjs.trim()], ['function', 'function']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
