// The package as users get it: ESM and CommonJS entry points, type declarations checked by
// tsc --strict on a consumer file (both module kinds) and holding the public API only, and
// `npm pack` of a clean copy of this folder (no dist: prepack builds it) installed into an
// empty folder with nothing but its peer dependency.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const PKG = join(dirname(fileURLToPath(import.meta.url)), '..');
const NAMES = [
  'Client',
  'DlockError',
  'DeadlockError',
  'LostError',
  'ModuleNotLoadedError',
  'ServerConnectionError',
  'WrongTypeError',
];

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
    execFileSync(process.execPath, [tsc, '-p', join(PKG, 'test/types/tsconfig.json')], {
      encoding: 'utf8',
    });
  } catch (e) {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  }
});

test('the declarations hold the public API only (no internals, no source maps)', () => {
  for (const build of ['esm', 'cjs']) {
    const dir = join(PKG, 'dist', build);
    const files = readdirSync(dir);
    assert.deepEqual(
      files.filter((f) => f.endsWith('.map')),
      [],
      'no source maps of unshipped sources',
    );
    const api = ['index', 'client', 'hold', 'locks', 'errors']
      .map((f) => readFileSync(join(dir, `${f}.d.ts`), 'utf8'))
      .join('\n');
    // Member declarations and types that are the package's own business.
    for (const internal of [
      /\bclass Entry\b/,
      /\b(entry|released|topo|owned|request)\??\s*[:;]/,
      /\b(renewHold|releaseHold|acquireRequest|checkDeadline|lose|make)\(/,
      /\bHoldOwner\b/,
    ]) {
      assert.ok(
        !internal.test(api),
        `${build}: the declarations have ${internal}: ${api.match(internal)?.[0]}`,
      );
    }
  }
});

test('npm pack of a clean copy builds first, and installs into an empty folder with only redis beside it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'dlock-pack-'));
  try {
    // A clean checkout: the sources and manifest, no dist (node_modules linked: the dev tools).
    const clean = join(dir, 'clean');
    mkdirSync(clean);
    for (const f of [
      'package.json',
      'package-lock.json',
      'README.md',
      'CHANGELOG.md',
      'tsconfig.json',
      'tsconfig.esm.json',
      'tsconfig.cjs.json',
      'src',
      'scripts',
    ]) {
      if (existsSync(join(PKG, f))) cpSync(join(PKG, f), join(clean, f), { recursive: true });
    }
    rmSync(join(clean, 'src', 'scripts.generated.ts'), { force: true });
    symlinkSync(join(PKG, 'node_modules'), join(clean, 'node_modules'));
    const packed = execFileSync('npm', ['pack', '--json', '--pack-destination', dir], {
      cwd: clean,
      encoding: 'utf8',
    });
    const [{ filename, files }] = JSON.parse(packed.slice(packed.search(/^\[/m)));
    const paths = files.map((f) => f.path);
    assert.ok(
      paths.includes('dist/esm/index.js') &&
        paths.includes('dist/cjs/index.js') &&
        paths.includes('dist/cjs/index.d.ts'),
      paths.join(' '),
    );
    assert.ok(
      !paths.some((p) => p.startsWith('src/') || p.startsWith('test/')),
      'no sources or tests shipped',
    );
    assert.ok(!paths.some((p) => p.endsWith('.map')), 'no source maps');
    const redisVersion = JSON.parse(
      readFileSync(join(PKG, 'node_modules/redis/package.json'), 'utf8'),
    ).version;
    writeFileSync(join(dir, 'package.json'), '{"name":"consumer","private":true}');
    execFileSync(
      'npm',
      [
        'install',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        join(dir, filename),
        `redis@${redisVersion}`,
      ],
      { cwd: dir, encoding: 'utf8' },
    );
    const manifest = JSON.parse(
      readFileSync(join(dir, 'node_modules/dlock-client/package.json'), 'utf8'),
    );
    assert.equal(manifest.dependencies, undefined, 'no runtime dependency but the peer');
    const esm = execFileSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "import { Client } from 'dlock-client'; console.log(typeof Client)",
      ],
      { cwd: dir, encoding: 'utf8' },
    );
    const cjs = execFileSync(
      process.execPath,
      ['-e', "console.log(typeof require('dlock-client').Client)"],
      { cwd: dir, encoding: 'utf8' },
    );
    assert.deepEqual([esm.trim(), cjs.trim()], ['function', 'function']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
