/**
 * `npm run bench`: prints the project's figures on a local dev server.
 *   - orchestration overhead per turn and history size per turn (demo harness)
 *   - history events and bytes per steady-state turn and for a 300-turn run (BENCH_HISTORY_TURNS)
 *   - Docker sandbox: container create+start, per-turn exec overhead, teardown (needs the engine and the image)
 *   - per real CLI: one turn through the workflow vs the bare CLI (needs test/e2e/clis installed)
 * Select parts with arguments: `npm run bench -- orchestration history docker clis`.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { findTemporalCli, temporalCliInstallHint } from '../src/temporal/cli-path.js';
import { startDevServer } from '../src/temporal/dev-server.js';
import { benchClis, printClis } from './clis.js';
import { benchDocker, printDocker } from './docker.js';
import { benchHistory, printHistory } from './history.js';
import { benchOrchestration, printOrchestration, quietRuntime } from './orchestration.js';

const parts = new Set(process.argv.slice(2).length ? process.argv.slice(2) : ['orchestration', 'history', 'docker', 'clis']);
const cli = findTemporalCli();
if (!cli) throw new Error(`npm run bench needs the Temporal CLI. ${temporalCliInstallHint}`);
quietRuntime();
const server = await startDevServer({ cliPath: cli.path });
try {
  if (parts.has('orchestration')) printOrchestration(await benchOrchestration({ temporalAddress: server.address, runs: Number(process.env.BENCH_RUNS ?? 15) }));

  if (parts.has('history')) {
    console.log('');
    printHistory(await benchHistory({ temporalAddress: server.address, turns: Number(process.env.BENCH_HISTORY_TURNS ?? 300) }));
  }

  if (parts.has('docker')) {
    const socket = process.env.DOCKER_HOST ?? (existsSync('/tmp/dockerd/docker.sock') ? 'unix:///tmp/dockerd/docker.sock' : undefined);
    if (!socket) console.log('\ndocker sandbox: skipped (no engine; start one with: eval "$(.ci/docker-engine.sh)")');
    else {
      process.env.DOCKER_HOST = socket;
      console.log('');
      printDocker(await benchDocker({ iterations: 10 }), 10);
    }
  }

  if (parts.has('clis')) {
    if (!existsSync(path.join(import.meta.dirname, '..', 'test', 'e2e', 'clis', 'node_modules', '.bin'))) {
      console.log('\nreal CLIs: skipped (install them: cd test/e2e/clis && npm install)');
    } else {
      const runs = Number(process.env.BENCH_CLI_RUNS ?? 5);
      printClis(await benchClis({ temporalAddress: server.address, runs }), runs);
    }
  }
} finally {
  await server.stop();
}
