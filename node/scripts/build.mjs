// Builds dist/esm and dist/cjs with tsc (two tsconfigs), after embedding src/scripts.json
// (the script backend's Lua texts) as a TypeScript module both builds compile.
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const json = JSON.parse(readFileSync(join(root, 'src/scripts.json'), 'utf8'));
writeFileSync(
  join(root, 'src/scripts.generated.ts'),
  '// Generated from scripts.json by scripts/build.mjs; do not edit.\n' +
    `export const SCRIPTS = ${JSON.stringify(json, null, 2)} as const;\n`,
);
// `--embed-only`: the generated module alone (what the type check needs).
if (process.argv.includes('--embed-only')) process.exit(0);
rmSync(join(root, 'dist'), { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
for (const config of ['tsconfig.esm.json', 'tsconfig.cjs.json']) {
  execFileSync(process.execPath, [tsc, '-p', join(root, config)], { stdio: 'inherit' });
}
// The package is "type": "module"; the CommonJS half says so for its own folder.
writeFileSync(join(root, 'dist/cjs/package.json'), '{ "type": "commonjs" }\n');
