/** A worker that dies (SIGKILL: a lost host) takes its turns' processes with it: nothing of them is orphaned. */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, it } from 'vitest';
import { processesIn } from '../support/processes.js';

it('SIGKILL of the worker kills the processes of its running turns', { timeout: 60_000 }, async () => {
  const workspace = mkdtempSync(path.join(os.tmpdir(), 'dh-orphan-'));
  const worker = spawn(process.execPath, ['--import', 'tsx', path.join(import.meta.dirname, 'orphan-host.ts'), workspace], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    worker.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('started') && resolve());
    worker.once('exit', (code) => reject(new Error(`orphan-host exited with ${code}`)));
  });
  await expect.poll(() => processesIn(workspace).length, { timeout: 10_000 }).toBeGreaterThan(0);
  const turn = processesIn(workspace);
  worker.kill('SIGKILL');
  try {
    await expect.poll(() => processesIn(workspace), { timeout: 5000, interval: 50 }).toEqual([]);
  } finally {
    for (const pid of processesIn(workspace).filter((p) => turn.includes(p))) process.kill(pid, 'SIGKILL');
  }
});
