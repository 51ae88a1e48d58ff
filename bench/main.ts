/**
 * `npm run bench`: prints the project's figures on a local dev server.
 *   - orchestration overhead per turn and history size per turn (demo harness)
 *   - Docker sandbox: container create+start, per-turn exec overhead, teardown (needs DOCKER_HOST and the image)
 *   - per real CLI: one turn through the workflow vs the bare CLI (needs test/e2e/clis installed)
 * Select parts with arguments: `npm run bench -- orchestration docker clis`.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { findTemporalCli, temporalCliInstallHint } from '../src/temporal/cli-path.js';
import { startDevServer } from '../src/temporal/dev-server.js';
import { benchOrchestration, printOrchestration, quietRuntime } from './orchestration.js';

const parts = new Set(process.argv.slice(2).length ? process.argv.slice(2) : ['orchestration', 'docker', 'clis']);
const cli = findTemporalCli();
if (!cli) throw new Error(`npm run bench needs the Temporal CLI. ${temporalCliInstallHint}`);
quietRuntime();
const server = await startDevServer({ cliPath: cli.path });
try {
  if (parts.has('orchestration')) printOrchestration(await benchOrchestration({ temporalAddress: server.address, runs: Number(process.env.BENCH_RUNS ?? 15) }));

  if (parts.has('docker')) {
    const socket = process.env.DOCKER_HOST ?? (existsSync('/tmp/dockerd/docker.sock') ? 'unix:///tmp/dockerd/docker.sock' : undefined);
    if (!socket) console.log('\ndocker sandbox: skipped (no engine; start one with: eval "$(.ci/docker-engine.sh)")');
    else {
      process.env.DOCKER_HOST = socket;
      const { benchDocker } = await import('./docker.js');
      const d = await benchDocker({ iterations: 10 });
      console.log('\ndocker sandbox, median of 10:');
      console.log(`  container create+start  ${d.createStartMs} ms`);
      console.log(`  exec overhead per turn  ${d.execMs} ms`);
      console.log(`  teardown (kill+remove)  ${d.teardownMs} ms`);
    }
  }

  if (parts.has('clis')) {
    const clisDir = path.join(import.meta.dirname, '..', 'test', 'e2e', 'clis', 'node_modules', '.bin');
    const benchFile = path.join(import.meta.dirname, 'clis.ts');
    if (!existsSync(clisDir) || !existsSync(benchFile)) console.log('\nreal CLIs: skipped (install them: cd test/e2e/clis && npm ci)');
    else {
      const { benchClis } = (await import(benchFile)) as { benchClis: (o: { temporalAddress: string; runs?: number }) => Promise<{ cli: string; workflowTurnMs: number; bareTurnMs: number; ratio: number }[]> };
      const rows = await benchClis({ temporalAddress: server.address, runs: Number(process.env.BENCH_CLI_RUNS ?? 5) });
      console.log('\none turn against the fake vendor, median (ms):');
      console.log('  cli        workflow   bare CLI   ratio');
      for (const r of rows) console.log(`  ${r.cli.padEnd(10)} ${r.workflowTurnMs.toFixed(0).padStart(8)} ${r.bareTurnMs.toFixed(0).padStart(10)}   ${r.ratio.toFixed(2)}`);
    }
  }
} finally {
  await server.stop();
}
