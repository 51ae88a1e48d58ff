import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Most files wait on real processes (CLIs, the Temporal server, Docker), not on the CPU: two at a time took the
    // suite from 880 s to 517 s on a 2-core machine with every test passing (Vitest's default there is one).
    maxWorkers: 2,
    globalSetup: ['test/support/global-setup.ts'],
  },
});
