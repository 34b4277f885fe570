// The Node package's lint (`npm run lint`, run by `make lint`): ESLint's and typescript-eslint's
// recommended rules on the sources, tests, scripts and benchmark, and no line over 100 columns
// (the layout itself is Prettier's, `.prettierrc.json`, checked by the same script).
import js from '@eslint/js';
import { defineConfig, globalIgnores } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  globalIgnores(['dist/', 'src/scripts.generated.ts']),
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    rules: {
      // Prettier wraps code at 100 columns; this catches what it cannot wrap (comments, strings).
      'max-len': ['error', { code: 100, ignoreUrls: true }],
      // `_name`: a parameter an override or a callback signature needs but does not use.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
    },
  },
  {
    // A test's title and a benchmark's table row read best whole: long strings are let be there.
    files: ['test/**', 'bench/**'],
    rules: {
      'max-len': [
        'error',
        { code: 100, ignoreUrls: true, ignoreStrings: true, ignoreTemplateLiterals: true },
      ],
    },
  },
);
