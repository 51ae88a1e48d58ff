/**
 * Docker sandbox figures: median container create+start (`start()`), per-exec overhead of a trivial process
 * (`true` through the executor, with its pidfile wrapper) and teardown (`end()`). Needs a running engine
 * and the test image: `eval "$(.ci/docker-engine.sh)" && scripts/build-sandbox-image.sh`.
 * Run directly: `npx tsx bench/docker.ts [N]`.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Dockerode from 'dockerode';
import { ciDockerSocket } from '../src/sandbox/docker-client.js';
import { DockerSandboxProvider } from '../src/sandbox/docker-provider.js';
import { median } from './stats.js';

/** Options of `benchDocker`. */
export interface BenchDockerOptions {
  readonly docker?: Dockerode;
  /** Default `durable-harness-sandbox:test`. */
  readonly image?: string;
  /** Samples per figure; default 10. */
  readonly iterations?: number;
}

/** Medians in milliseconds. */
export interface BenchDockerResult {
  readonly createStartMs: number;
  readonly execMs: number;
  /** The turn's end: leftovers checked (and swept when any are found), as `runTurn` does after every turn. */
  readonly turnEndMs: number;
  /** A bare `docker exec` of the same program straight through the engine API, in the same container. */
  readonly bareExecMs: number;
  readonly teardownMs: number;
}

/** Measures the Docker provider on the real engine; one fresh container per sample. */
export async function benchDocker(opts: BenchDockerOptions = {}): Promise<BenchDockerResult> {
  if (!opts.docker && !process.env.DOCKER_HOST && existsSync(ciDockerSocket)) process.env.DOCKER_HOST = `unix://${ciDockerSocket}`;
  const docker = opts.docker ?? new Dockerode();
  const iterations = opts.iterations ?? 10;
  const root = await mkdtemp(path.join(tmpdir(), 'dh-bench-docker-'));
  const provider = new DockerSandboxProvider({ docker, image: opts.image ?? 'durable-harness-sandbox:test', workspaceRoot: root });
  const tag = randomBytes(3).toString('hex');
  const createStart: number[] = [];
  const exec: number[] = [];
  const turnEnd: number[] = [];
  const bareExec: number[] = [];
  const teardown: number[] = [];
  try {
    for (let i = 0; i < iterations; i++) {
      let t = performance.now();
      const ref = await provider.start({
        workflowId: `bench-docker-${tag}-${i}`,
        runId: 'bench',
        agent: 'bench',
        identity: { tenantId: 'bench', userId: 'bench' },
        spec: { provider: 'docker', workspaceScope: 'run', networkPolicy: 'none' },
      });
      createStart.push(performance.now() - t);
      const handle = await provider.attach(ref);
      t = performance.now();
      const proc = handle.executor.exec({ argv: ['true'] });
      for await (const _line of proc.lines) {
        // drain
      }
      const exit = await proc.exit;
      exec.push(performance.now() - t);
      if (exit.code !== 0) throw new Error(`bench exec exited ${JSON.stringify(exit)}: ${proc.stderrTail()}`);
      t = performance.now();
      await handle.killLeftovers();
      turnEnd.push(performance.now() - t);
      t = performance.now();
      const bare = await docker.getContainer(handle.container).exec({ Cmd: ['true'], User: '1000:1000', AttachStdout: true, AttachStderr: true });
      const stream = await bare.start({});
      await new Promise<void>((resolve) => {
        stream.on('end', resolve);
        stream.on('close', resolve);
        stream.resume();
      });
      bareExec.push(performance.now() - t);
      await handle.release();
      t = performance.now();
      await provider.end(ref);
      teardown.push(performance.now() - t);
    }
  } finally {
    await rm(root, { recursive: true, force: true });
  }
  const tenth = (v: number) => Math.round(v * 10) / 10;
  return { createStartMs: tenth(median(createStart)), execMs: tenth(median(exec)), turnEndMs: tenth(median(turnEnd)), bareExecMs: tenth(median(bareExec)), teardownMs: tenth(median(teardown)) };
}

/** The figures as lines (printed, and the benchmarks page's section). */
export function dockerLines(result: BenchDockerResult, iterations: number): string[] {
  return [
    `docker sandbox, median of ${iterations}:`,
    `  container create+start  ${result.createStartMs} ms`,
    `  exec overhead per turn  ${result.execMs} ms, turn end (leftover check) ${result.turnEndMs} ms; a bare docker exec ${result.bareExecMs} ms`,
    `  per turn over a bare docker exec: ${(result.execMs + result.turnEndMs - result.bareExecMs).toFixed(1)} ms (issue 22's target ≤ 20 ms)`,
    `  teardown (kill+remove)  ${result.teardownMs} ms`,
  ];
}

export function printDocker(result: BenchDockerResult, iterations: number): void {
  for (const line of dockerLines(result, iterations)) console.log(line);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const iterations = Number(process.argv[2] ?? 10);
  printDocker(await benchDocker({ iterations }), iterations);
}
