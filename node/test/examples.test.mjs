// Every TypeScript/JavaScript example users read compiles with `tsc --strict` as written:
// the ```ts and ```js blocks of README.md, and examples/node/dlock_client.mjs (the example
// docs/CLIENTS.md quotes), against the built declarations.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const PKG = join(dirname(fileURLToPath(import.meta.url)), '..');
const REPO = join(PKG, '..');

/** The fenced blocks of `lang` in a Markdown text. */
function blocks(markdown, lang) {
  return [...markdown.matchAll(new RegExp('^```' + lang + '\\n([\\s\\S]*?)^```', 'gm'))].map(
    (m) => m[1],
  );
}

test('README examples and examples/node/dlock_client.mjs pass tsc --strict as written', () => {
  const dir = mkdtempSync(join(tmpdir(), 'dlock-examples-'));
  try {
    const readme = readFileSync(join(PKG, 'README.md'), 'utf8');
    const files = [];
    const ts = blocks(readme, 'ts');
    assert.ok(ts.length > 0, 'README.md has TypeScript examples');
    ts.forEach((code, i) => {
      writeFileSync(join(dir, `readme-${i}.mts`), code);
      files.push(`readme-${i}.mts`);
    });
    blocks(readme, 'js').forEach((code, i) => {
      writeFileSync(join(dir, `readme-${i}.mjs`), code);
      files.push(`readme-${i}.mjs`);
    });
    writeFileSync(
      join(dir, 'dlock_client.mjs'),
      readFileSync(join(REPO, 'examples/node/dlock_client.mjs')),
    );
    files.push('dlock_client.mjs');
    const tsconfig = {
      compilerOptions: {
        strict: true,
        noEmit: true,
        allowJs: true,
        checkJs: true,
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        target: 'ES2022',
        skipLibCheck: false,
        types: ['node'],
        typeRoots: [join(PKG, 'node_modules/@types')],
        // The package as an installed user gets it: its exports' declarations.
        paths: { 'dlock-client': [join(PKG, 'dist/esm/index.d.ts')] },
      },
      files,
    };
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify(tsconfig));
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    try {
      execFileSync(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json')], { encoding: 'utf8' });
    } catch (e) {
      assert.fail(`tsc --strict refused an example:\n${e.stdout}${e.stderr}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
