/**
 * The cost of containing one process on the local sandbox: `/bin/true` wrapped by the containment helper
 * (native/dh-contain.c, through src/sandbox/local-containment.ts's `wrapArgv`) beside the util-linux chain it
 * replaced (setpriv → unshare → [sh + ip for the loopback] → sh init → the process; rebuilt here from the removed
 * code, for the comparison only) and the bare process. Per variant: wall time per spawn (spawn to reaped exit) and
 * CPU per spawn (user + system of the reaped children, so of every process of the chain), medians over interleaved
 * batches. Run alone: `npx tsx bench/contain.ts [batches] [spawns per batch]`; in `npm run bench -- contain`.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { wrapArgv, type LocalIsolation } from '../src/sandbox/local-containment.js';
import { cpuSeconds } from './proc.js';
import { median } from './stats.js';

export interface ContainRow {
  readonly variant: string;
  readonly wallMs: number;
  readonly cpuMs: number;
}

export interface ContainResult {
  readonly batches: number;
  readonly spawns: number;
  readonly rows: readonly ContainRow[];
  /** Why the old chain was not measured, if it was not. */
  readonly skipped?: string;
}

const isRoot = process.geteuid?.() === 0;
const ip = ['/usr/sbin/ip', '/sbin/ip', '/usr/bin/ip', '/bin/ip'].find((p) => existsSync(p));
const onPath = (name: string) => spawnSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' }).status === 0;

/** The removed chain, as src/sandbox/local-containment.ts built it before the helper. */
function oldChain(net: boolean, argv: readonly string[]): string[] {
  const flags = [...(net ? ['--net'] : []), '--pid', '--fork', '--kill-child', '--mount-proc'];
  const lo = net && ip ? ['/bin/sh', '-c', '"$0" link set lo up 2>/dev/null; exec "$@"', ip] : [];
  const init = ['/bin/sh', '-c', 'unset PWD; exec 3>&2 2>/dev/null; "$@" 2>&3 3>&-; exit $?', 'durable-harness-init'];
  return ['setpriv', '--pdeathsig', 'KILL', '--', 'unshare', ...(isRoot ? flags : ['--user', '--map-current-user', ...flags]), '--', ...lo, ...init, ...argv];
}

export function benchContain(batches = 10, spawns = 40): ContainResult {
  const argv = ['/bin/true'];
  const helper = (isolation: LocalIsolation) => wrapArgv(isolation, argv);
  const oldMissing = ['setpriv', 'unshare'].filter((tool) => !onPath(tool));
  const variants: [string, string[]][] = [
    ['bare /bin/true', argv],
    ['pid namespace, helper', helper({ containment: 'pid-namespace' })],
    ...(oldMissing.length ? [] : [['pid namespace, old chain', oldChain(false, argv)] as [string, string[]]]),
    ['pid + network namespace, helper', helper({ containment: 'pid-namespace', network: 'loopback' })],
    ...(oldMissing.length ? [] : [['pid + network namespace, old chain', oldChain(true, argv)] as [string, string[]]]),
  ];
  const wall = new Map<string, number[]>(variants.map(([name]) => [name, []]));
  const cpu = new Map<string, number[]>(variants.map(([name]) => [name, []]));
  for (let b = 0; b < batches; b++) {
    for (let k = 0; k < variants.length; k++) {
      const [name, command] = variants[(b + k) % variants.length]!;
      const cpuBefore = cpuSeconds(process.pid, undefined, true)!;
      const times: number[] = [];
      for (let i = 0; i < spawns; i++) {
        const started = performance.now();
        const result = spawnSync(command[0]!, command.slice(1), { stdio: 'ignore' });
        times.push(performance.now() - started);
        if (result.status !== 0) throw new Error(`${name}: ${command.join(' ')} exited ${result.status ?? result.signal}`);
      }
      wall.get(name)!.push(median(times));
      cpu.get(name)!.push(((cpuSeconds(process.pid, undefined, true)! - cpuBefore) * 1000) / spawns);
    }
  }
  return {
    batches,
    spawns,
    rows: variants.map(([variant]) => ({ variant, wallMs: median(wall.get(variant)!), cpuMs: median(cpu.get(variant)!) })),
    ...(oldMissing.length ? { skipped: `the old chain needs ${oldMissing.join(' and ')} (util-linux)` } : {}),
  };
}

export function containLines(r: ContainResult): string[] {
  const bare = r.rows[0]!;
  return [
    `one contained \`/bin/true\` per spawn (spawnSync to reaped exit), medians of ${r.batches} interleaved batches of ${r.spawns}:`,
    '',
    '| variant | wall per spawn (ms) | CPU per spawn (ms) | CPU over bare (ms) |',
    '| --- | ---: | ---: | ---: |',
    ...r.rows.map((row) => `| ${row.variant} | ${row.wallMs.toFixed(2)} | ${row.cpuMs.toFixed(2)} | ${(row.cpuMs - bare.cpuMs).toFixed(2)} |`),
    ...(r.skipped ? ['', `(old chain skipped: ${r.skipped})`] : []),
  ];
}

export function printContain(r: ContainResult): void {
  console.log(`\ncontain: ${containLines(r).join('\n  ')}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  printContain(benchContain(Number(process.argv[2] ?? 10), Number(process.argv[3] ?? 40)));
}
