// Flat config. Workflow code must be deterministic: no Node built-ins, no floating promises.
import tseslint from 'typescript-eslint';
import { roomsPlugin } from './lint/rooms.js';

const nodeBuiltins = [
  'assert', 'async_hooks', 'buffer', 'child_process', 'cluster', 'crypto', 'dgram', 'dns', 'events', 'fs',
  'fs/promises', 'http', 'http2', 'https', 'net', 'os', 'path', 'perf_hooks', 'process', 'readline', 'stream',
  'timers', 'tls', 'url', 'util', 'v8', 'vm', 'worker_threads', 'zlib',
];

export default tseslint.config(
  { ignores: ['node_modules/**', '.data/**', '.tools/**', 'dist/**', 'packages/*/dist/**', 'test/e2e/clis/node_modules/**', 'coverage/**', 'src/adapters/two-way/codex-protocol/**'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // The rooms of src/ and their order (lint/rooms.js): nothing imports a room above its own.
    files: ['src/**/*.ts'],
    plugins: { rooms: roomsPlugin },
    rules: { 'rooms/order': 'error' },
  },
  {
    files: ['src/workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        paths: [
          ...nodeBuiltins.map((name) => ({ name, message: 'Workflow code must be deterministic: no Node built-ins.' })),
          ...nodeBuiltins.map((name) => ({ name: `node:${name}`, message: 'Workflow code must be deterministic: no Node built-ins.' })),
        ],
        patterns: [
          { group: ['**/activities/*', '**/adapters/*', '**/sandbox/*', '**/ledger/*', '**/credentials/*', '**/cli/*'], allowTypeImports: true,
            message: 'Workflows may import activity and adapter code as types only.' },
        ],
      }],
      'no-restricted-globals': ['error',
        { name: 'setTimeout', message: 'Use sleep() from @temporalio/workflow.' },
        { name: 'setInterval', message: 'Use sleep() from @temporalio/workflow.' },
        { name: 'process', message: 'Workflow code must not read the process environment.' },
      ],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
  },
);
