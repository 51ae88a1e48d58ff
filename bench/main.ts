/** `npm run bench`: the project's figures on a local Temporal dev server (SQLite in WAL, as `durable-harness dev`). */import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { findTemporalCli, temporalCliInstallHint } from '../src/temporal/cli-path.js';
import { freePort, startDevServer } from '../src/temporal/dev-server.js';
import { approvalsLines, benchApprovals, printApprovals } from './approvals.js';
import { benchClis, clisTable, printClis } from './clis.js';
import { benchContain, containLines, printContain } from './contain.js';
import { writeSection } from './docs.js';
import { benchDocker, dockerLines, printDocker } from './docker.js';
import { benchEvents, eventsLines, printEvents } from './events.js';
import { benchFlood, floodTable, printFlood } from './flood.js';
import { benchGateway, gatewayLines, printGateway } from './gateway.js';
import { benchHistory, historyLines, printHistory } from './history.js';
import { benchOrchestration, orchestrationTable, orchestrationVerdict, printOrchestration, quietRuntime } from './orchestration.js';
import { benchHomes, homesLines, printHomes } from './homes.js';
import { machineDescription } from './proc.js';
import { benchRepo, printRepo, repoLines } from './repo.js';
import { benchScale, floorTable, printScale, saturation, scaleDetails, scaleTable } from './scale.js';
import { benchWorkers, printWorkers, workersLines } from './workers.js';

const usage = `npm run bench -- [PART ...] [OPTIONS]: the project's figures on a local Temporal dev server.
Parts (default: all but flood):
  orchestration  overhead per turn beside Temporal's floor measured in the same run, eager start, history size
  history        events and bytes per steady-state turn and for a 300-turn run of a harness without native
                 resume (BENCH_HISTORY_TURNS)
  scale          one worker, 10/50/100/200 concurrent runs of 3 turns of 2 s: overhead p50/p99, start latency,
                 CPU, RSS, event-loop delay, where it saturates
  docker         container create+start, per-turn exec overhead, teardown (needs the engine and the image)
  clis           per real CLI: one turn through the workflow vs the bare CLI (needs test/e2e/clis installed)
  workers        1, 2 and 4 worker processes on one queue and one PostgreSQL ledger: runs/min, turns/s, turn
                 overhead p50/p99, worker RSS per concurrent run (--worker-runs N, default 16)
  flood          output floods (a 600 MB line, 1M tiny lines, 100k junk lines, 500 MB of 1 KB lines): the worker's
                 peak RSS and a neighbour's turn latency ratio, flooded vs quiet (--floods NAME,... to pick some)
  gateway        a model call through the egress gateway (forwarder pipe + gateway) beside a direct one: p50/p99
                 latency and time to first streamed byte, added latency, gateway CPU per call (--gateway-calls N, default 200)
  approvals      30 permission requests in one turn, each approved as soon as the run lists it: the harness's
                 request → answer, the approve update's round trip, the update's return → the answer
  homes          codex's first turn in a fresh per-run home, a used one, and one seeded from a prepared template
  repo           a workspace of a 3,000-file repository: a plain clone against the per-host mirror (src/git)
  events         a harness line to a follower of run.events(), on the SQLite and the PostgreSQL ledger: p50/p99/max
  contain        one contained /bin/true: the local sandbox's containment helper vs the util-linux chain it
                 replaced vs the bare process, wall time and CPU per spawn
Options: --write-docs (docs/BENCHMARKS.md), --runs N (orchestration iterations, default 15), --turns N
(orchestration's longer runs, default 10), --levels 10,50, --cli-runs N (default 5), --cpu-prof DIR (scale worker).`;

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    help: { type: 'boolean', short: 'h' },
    'write-docs': { type: 'boolean' },
    runs: { type: 'string' },
    turns: { type: 'string' },
    levels: { type: 'string' },
    'cli-runs': { type: 'string' },
    'cpu-prof': { type: 'string' },
    'worker-runs': { type: 'string' },
    floods: { type: 'string' },
    'gateway-calls': { type: 'string' },
  },
});
if (values.help) {
  console.log(usage);
  process.exit(0);
}
const known = ['orchestration', 'history', 'scale', 'docker', 'clis', 'workers', 'flood', 'gateway', 'approvals', 'homes', 'repo', 'contain', 'events'];
for (const p of positionals) if (!known.includes(p)) throw new Error(`unknown bench part "${p}"; use ${known.join(', ')}`);
// `flood` pushes gigabytes through the worker: only when asked for.
const parts = new Set(positionals.length ? positionals : known.filter((p) => p !== 'flood'));
const machine = machineDescription();
console.log(`machine: ${machine}`);
/** The machine as each part starts (its load average is the one that matters for that part's figures). */
let partMachine = machine;
let partStarted = new Date();
const startPart = () => {
  partMachine = machineDescription();
  partStarted = new Date();
};
const docs = (name: string, title: string, command: string, lines: string[]) => {
  if (!values['write-docs']) return;
  const when = partStarted.toISOString().slice(0, 16).replace('T', ' ');
  writeSection(name, [`## ${title}`, '', `Measured ${when} UTC on ${partMachine}.`, `Command: \`${command}\``, '', ...lines].join('\n'));
};

const cli = findTemporalCli();
if (!cli) throw new Error(`npm run bench needs the Temporal CLI. ${temporalCliInstallHint}`);
quietRuntime();
const dbDir = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-db-'));
const server = await startDevServer({ cliPath: cli.path, dbFile: path.join(dbDir, 'temporal.db'), metricsPort: await freePort() });
try {
  if (parts.has('orchestration')) {
    startPart();
    const runs = Number(values.runs ?? process.env.BENCH_RUNS ?? 15);
    const longTurns = Number(values.turns ?? 10);
    const f = await benchOrchestration({ temporalAddress: server.address, runs, serverPid: server.pid });
    printOrchestration(f);
    // The same comparison on longer runs: the run's fixed start and end weigh less per turn.
    const long = await benchOrchestration({ temporalAddress: server.address, runs, turns: longTurns, serverPid: server.pid });
    console.log('');
    printOrchestration(long);
    docs('orchestration', 'Orchestration overhead per turn, beside the floor', `npm run bench -- orchestration --runs ${runs} --turns ${longTurns}`, [
      `Demo agent, ${f.turnsPerRun} turns per run, ${f.runs} interleaved iterations (every variant once per iteration, rotating order).`,
      'The floor is a workflow whose turn is one regular activity doing the same harness work as one in-process turn.',
      '',
      ...orchestrationTable(f),
      '',
      ...orchestrationVerdict(f).map((l) => `- ${l}`),
      '',
      `The same on ${long.turnsPerRun}-turn runs of the scripted harness (one \`echo\` action per turn, then success), ${long.runs} interleaved iterations:`,
      '',
      ...orchestrationTable(long),
      '',
      ...orchestrationVerdict(long).map((l) => `- ${l}`),
    ]);
  }

  if (parts.has('scale')) {
    startPart();
    const levels = (values.levels ?? '10,50,100,200').split(',').map(Number);
    const rows = await benchScale({ temporalAddress: server.address, serverPid: server.pid, metricsUrl: server.metricsUrl, levels, cpuProfileDir: values['cpu-prof'] });
    printScale(rows, 3, 2);
    docs('scale', 'Scale: one worker, concurrent runs', `npm run bench -- scale --levels ${levels.join(',')}`, [
      'Concurrent runs of 3 turns of 2 s each (bench/harness/sleep-harness.sh), one worker process. Turn overhead: time between',
      'two turn results minus the 2 s (turns 2-3); start latency: the start call to the',
      'first turn\'s start; CPU ms per turn: CPU time over the level divided by the turns run (start and end of runs included);',
      'worker cores: its CPU over the level\'s wall time; loop delay: the worker main thread\'s event-loop delay.',
      '',
      ...scaleTable(rows),
      '',
      'Beside the bare Temporal wrapper around the same harness (bench/floor/bare.ts, its own worker process, each level run just after the project\'s):',
      '',
      ...floorTable(rows),
      '',
      `- saturates at: ${saturation(rows)}`,
      '',
      ...scaleDetails(rows),
    ]);
  }

  if (parts.has('history')) {
    startPart();
    console.log('');
    const turns = Number(process.env.BENCH_HISTORY_TURNS ?? 300);
    // The same run with a replay budget no conversation reaches: what the bound saves.
    const unbounded = await benchHistory({ temporalAddress: server.address, turns, replayMaxTokens: 100_000_000 });
    const bounded = await benchHistory({ temporalAddress: server.address, turns });
    printHistory(bounded, unbounded);
    docs('history', 'History and replayed tokens of a long run', 'npm run bench -- history', ['```', ...historyLines(bounded, unbounded), '```']);
  }

  if (parts.has('docker')) {
    startPart();
    const socket = process.env.DOCKER_HOST ?? (existsSync('/tmp/dockerd/docker.sock') ? 'unix:///tmp/dockerd/docker.sock' : undefined);
    if (!socket) console.log('\ndocker sandbox: skipped (no engine; start one with: eval "$(.ci/docker-engine.sh)")');
    else {
      process.env.DOCKER_HOST = socket;
      console.log('');
      const figures = await benchDocker({ iterations: 10 });
      printDocker(figures, 10);
      docs('docker', 'The Docker sandbox: start, per-turn exec, teardown', 'npm run bench -- docker', ['```', ...dockerLines(figures, 10), '```']);
    }
  }

  if (parts.has('clis')) {
    startPart();
    if (!existsSync(path.join(import.meta.dirname, '..', 'test', 'e2e', 'clis', 'node_modules', '.bin'))) {
      console.log('\nreal CLIs: skipped (install them: cd test/e2e/clis && npm install)');
    } else {
      const runs = Number(values['cli-runs'] ?? process.env.BENCH_CLI_RUNS ?? 5);
      const rows = await benchClis({ temporalAddress: server.address, runs });
      printClis(rows, runs);
      docs('clis', 'Per real CLI: one turn through the workflow vs the bare CLI', `npm run bench -- clis --cli-runs ${runs}`, clisTable(rows, runs));
    }
  }

  if (parts.has('workers')) {
    startPart();
    const runs = Number(values['worker-runs'] ?? 16);
    const figures = await benchWorkers({ temporalAddress: server.address, runs });
    printWorkers(figures);
    docs('workers', 'Many workers: 1, 2 and 4 worker processes', `npm run bench -- workers --worker-runs ${runs}`, workersLines(figures));
  }
  if (parts.has('gateway')) {
    startPart();
    const calls = Number(values['gateway-calls'] ?? 200);
    const figures = await benchGateway({ calls });
    printGateway(figures);
    docs('gateway', 'The egress gateway: added latency per model call', `npm run bench -- gateway --gateway-calls ${calls}`, gatewayLines(figures).slice(1));
  }
  if (parts.has('approvals')) {
    startPart();
    const figures = await benchApprovals({ temporalAddress: server.address });
    printApprovals(figures);
    docs('approvals', 'Instant approvals: a permission request to the harness\'s answer', 'npm run bench -- approvals', approvalsLines(figures).slice(1));
  }
  if (parts.has('homes')) {
    startPart();
    console.log('\nhomes: a fresh per-run CLI home against a used one and a prepared template');
    const figures = await benchHomes();
    printHomes(figures);
    docs('homes', "Fresh CLI homes: codex's first-run cost", 'npm run bench -- homes', homesLines(figures));
  }
  if (parts.has('repo')) {
    startPart();
    console.log('\nrepo: a run\'s workspace from a fresh clone against the per-host mirror cache');
    const figures = await benchRepo();
    printRepo(figures);
    docs('repo', 'A run on a repository: clone against the mirror cache', 'npm run bench -- repo', repoLines(figures));
  }
  if (parts.has('contain')) {
    startPart();
    const figures = benchContain();
    printContain(figures);
    docs('contain', 'Containing a process on the local sandbox: the helper vs the old chain', 'npm run bench -- contain', containLines(figures));
  }
  if (parts.has('events')) {
    startPart();
    const figures = await benchEvents({ temporalAddress: server.address });
    printEvents(figures);
    docs('events', 'Live run events: a harness line to a follower', 'npm run bench -- events', eventsLines(figures));
  }
  if (parts.has('flood')) {
    startPart();
    console.log('\nflood: one hostile run at a time beside normal runs on the same worker');
    const rows = await benchFlood({ temporalAddress: server.address, only: values.floods?.split(',') });
    printFlood(rows);
    docs('flood', 'Output floods: worker memory and a neighbour\'s pace', `npm run bench -- flood${values.floods ? ` --floods ${values.floods}` : ''}`, [
      'One worker (the bench process); one flooding run at a time, and beside it normal runs of 3 `echo` turns one after another',
      'until the flood is over. Peak RSS: the worker process, sampled every 20 ms while the flood lasted. Neighbour ratio: the',
      'median latency of neighbour turns that ran entirely inside the flood over the median of 9 quiet turns just before it.',
      'Targets (issue 18): RSS < 600 MB, ratio < 1.5.',
      '',
      ...floodTable(rows),
    ]);
  }
} finally {
  await server.stop();
  rmSync(dbDir, { recursive: true, force: true });
}
