/**
 * How much starting harness processes stalls the event loop, per spawn mode (src/sandbox/spawner.ts): bursts of
 * `burst` concurrent `sh -c 'sleep 0.2; echo done'` through the local executor, `rounds` times, in a process
 * grown to a worker's size (~300 MB: fork copies the page tables of the whole process). Modes alternate round
 * by round. Reports the event-loop delay (p99, max) while the bursts run and the wall time per burst.
 * Run alone: `npx tsx bench/spawn.ts [rounds] [burst]`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { LocalExecutor } from '../src/sandbox/local-executor.js';
import { SpawnPool, directSpawner, spawnModes, type SpawnMode, type Spawner } from '../src/sandbox/spawner.js';
import { median } from './stats.js';

export interface SpawnRow {
  readonly mode: SpawnMode;
  /** Event-loop delay while the bursts ran, ms: median over rounds of each round's p99 and max. */
  readonly loopP99Ms: number;
  readonly loopMaxMs: number;
  /** Median wall time of one burst (all processes started, run and reaped), ms. */
  readonly burstMs: number;
}

export async function benchSpawn(opts: { rounds?: number; burst?: number } = {}): Promise<SpawnRow[]> {
  const rounds = opts.rounds ?? 6;
  const burst = opts.burst ?? 40;
  // A heap the size of a busy worker's: what fork has to copy is what makes a spawn slow.
  const ballast: object[] = [];
  for (let i = 0; i < 2_000_000; i++) ballast.push({ i, s: `x${i}` });
  const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-spawn-'));
  const pool = new SpawnPool();
  const spawners: Record<SpawnMode, Spawner> = { direct: directSpawner, thread: pool.spawner };
  const samples = new Map<SpawnMode, { p99: number[]; max: number[]; ms: number[] }>(spawnModes.map((m) => [m, { p99: [], max: [], ms: [] }]));
  try {
    for (let round = 0; round <= rounds; round++) {
      for (const mode of round % 2 ? [...spawnModes].reverse() : spawnModes) {
        const executor = new LocalExecutor({ workspacePath: workspace, spawner: spawners[mode] });
        const loop = monitorEventLoopDelay({ resolution: 2 });
        loop.enable();
        // The monitor measures from its first tick on: let it tick before the burst blocks anything.
        await new Promise((r) => setTimeout(r, 20));
        const started = performance.now();
        const procs = Array.from({ length: burst }, () => executor.exec({ argv: ['/bin/sh', '-c', 'sleep 0.2; echo done'] }));
        await Promise.all(procs.map(async (p) => {
          for await (const line of p.lines) void line;
          await p.exit;
        }));
        const ms = performance.now() - started;
        loop.disable();
        if (round === 0) continue; // warm-up (the pool's threads start here)
        const s = samples.get(mode)!;
        s.p99.push(loop.percentile(99) / 1e6);
        s.max.push(loop.max / 1e6);
        s.ms.push(ms);
      }
    }
  } finally {
    await pool.close();
    rmSync(workspace, { recursive: true, force: true });
  }
  void ballast.length;
  return spawnModes.map((mode) => {
    const s = samples.get(mode)!;
    return { mode, loopP99Ms: median(s.p99), loopMaxMs: median(s.max), burstMs: median(s.ms) };
  });
}

export function spawnTable(rows: readonly SpawnRow[], rounds: number, burst: number): string[] {
  return [
    `${rounds} bursts of ${burst} concurrent \`sh -c 'sleep 0.2; echo done'\` per mode, alternating, in a ~300 MB process; medians over bursts.`,
    '',
    '| spawn mode | event-loop delay p99 (ms) | event-loop delay max (ms) | burst wall time (ms) |',
    '| --- | ---: | ---: | ---: |',
    ...rows.map((r) => `| ${r.mode} | ${r.loopP99Ms.toFixed(1)} | ${r.loopMaxMs.toFixed(1)} | ${Math.round(r.burstMs)} |`),
  ];
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const rounds = Number(process.argv[2] ?? 6);
  const burst = Number(process.argv[3] ?? 40);
  for (const line of spawnTable(await benchSpawn({ rounds, burst }), rounds, burst)) console.log(line);
}
