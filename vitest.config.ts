import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * The unit tier: files that need no Temporal server, no Docker engine, no database and no harness binary — pure
 * decisions, parsers, adapters over recorded fixtures, the SQLite ledger. `npm run test:unit` runs them alone, in
 * seconds, on a machine without the Temporal CLI. A new test file belongs here only if it passes that way; every
 * other file is in the integration tier, which starts one real Temporal dev server for all of them.
 */
const unit = [
  'test/activities/{approvals-broker,door}.test.ts',
  'test/adapters/{claude-code,codex,gemini-cli,opencode,pi,stdio-json}-adapter.test.ts',
  'test/adapters/{engine,home-template,two-way}.test.ts',
  'test/catalog/{contract-prompt,load}.test.ts',
  'test/cli/{conventions,escape,network-cli,units}.test.ts',
  'test/client/events.test.ts',
  'test/codec/{aes-gcm-codec,codec-auth}.test.ts',
  'test/contracts/{failures,repository}.test.ts',
  'test/credentials/resolve.test.ts',
  'test/envelope/parse.test.ts',
  'test/gateway/{flood,gateway,loopback,meter,tls}.test.ts',
  'test/git/*.test.ts',
  'test/ledger/sqlite-ledger.test.ts',
  'test/lint/rooms.test.ts',
  'test/multihost/affinity-unit.test.ts',
  'test/observability/config.test.ts',
  'test/operators/decision.test.ts',
  'test/package/out-of-tree-driver.test.ts',
  'test/permissions/{gate,policy}.test.ts',
  'test/sandbox/line-queue.test.ts',
  'test/temporal/connect.test.ts',
  'test/workflows/{approvals-state,decide,operator-view,payload-bounds,turn-spend-unit}.test.ts',
];

/** The workflow tier: the replay suite and the time-skipping server (no dev server; the bundle only). */
const workflow = ['test/replay/**/*.test.ts', 'test/timeskip/**/*.test.ts'];

/** The live tier: the real pinned CLIs against the fake vendor, a real Docker engine, a real browser. */
const live = ['test/e2e/**/*.test.ts', 'test/docker/**/*.test.ts', 'test/ui/**/*.test.ts', 'test/security/docker-attacks.test.ts', 'test/multihost/docker-hosts.test.ts'];

const bundle = 'test/support/bundle-setup.ts';
const server = 'test/support/global-setup.ts';

export default defineConfig({
  // An out-of-tree driver imports `durable-harness/adapters`; in the tests that entry is its source, not dist/ (unbuilt).
  resolve: { alias: [{ find: /^durable-harness\/adapters$/, replacement: fileURLToPath(new URL('./src/adapters/index.ts', import.meta.url)) }] },
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Most files wait on real processes (CLIs, the Temporal server, Docker), not on the CPU: two at a time took the
    // suite from 880 s to 517 s on a 2-core machine with every test passing (Vitest's default there is one).
    maxWorkers: 2,
    // `npm test` runs every project; one project alone: `npx vitest run --project <name>` (`npm run test:unit`).
    // The server tiers share one dev server and every tier one workflow bundle (test/support/*-setup.ts).
    projects: [
      { extends: true, test: { name: 'unit', include: unit } },
      { extends: true, test: { name: 'workflow', include: workflow, globalSetup: [bundle] } },
      {
        extends: true,
        test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: ['**/node_modules/**', ...unit, ...workflow, ...live], globalSetup: [bundle, server] },
      },
      { extends: true, test: { name: 'live', include: live, exclude: ['**/node_modules/**'], globalSetup: [bundle, server] } },
    ],
  },
});
