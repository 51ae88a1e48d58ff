/** What the benches read from /proc (Linux): process and thread CPU, RSS, and the machine's description. */
import { readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';

const ticksPerSecond = 100; // USER_HZ on Linux

/**
 * CPU seconds (user + system) of a process, or of one thread with `tid`; with `children`, of its children that
 * have exited and been waited for instead. Undefined once it is gone.
 */
export function cpuSeconds(pid: number, tid?: number, children = false): number | undefined {
  try {
    const stat = readFileSync(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`, 'utf8');
    // Fields after the command name, which may contain spaces: state is field 3, utime 14, stime 15,
    // cutime 16, cstime 17.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const at = children ? 13 : 11;
    return (Number(fields[at]) + Number(fields[at + 1])) / ticksPerSecond;
  } catch {
    return undefined;
  }
}

/** Resident set size of a process in MB; undefined once it is gone. */
export function rssMb(pid: number): number | undefined {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** The machine as a bench report states it: CPU model, cores, memory, load average now. */
export function machineDescription(): string {
  const cpus = os.cpus();
  const load = os.loadavg().map((l) => l.toFixed(2)).join(' ');
  return `${cpus.length} × ${cpus[0]?.model.trim() ?? 'unknown CPU'}, ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB RAM, ` +
    `Node ${process.version}, ${os.type()} ${os.release()}; load average at start ${load}`;
}

/** CPU seconds by thread name (`main`, else the kernel's `comm`: `node` for worker threads, `tokio-runtime-w`, …) of a process's live threads. */
export function threadCpuSeconds(pid: number): Record<string, number> {
  const out: Record<string, number> = {};
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = tid === String(pid) ? 'main' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out[name] = (out[name] ?? 0) + (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
    } catch {
      // the thread ended between listing and reading
    }
  }
  return out;
}
