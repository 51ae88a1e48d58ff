/**
 * Host identity for host affinity: every worker also polls its own task queue `<queue>@<host id>`, and a run
 * whose workspace lives on a worker's disk sends every activity that touches it there (docs/multi-host.md).
 */
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';

/** The environment variable that names this worker's host (stable across restarts; default: hostname + data dir). */
export const hostIdVariable = 'DURABLE_HARNESS_HOST_ID';

/**
 * This worker's host id: `DURABLE_HARNESS_HOST_ID` when set, else the hostname and a short hash of the data
 * directory, so a restarted worker with the same data dir gets its runs back, and two workers with different data
 * dirs on one machine are two hosts.
 */
export function hostIdFrom(env: Readonly<Record<string, string | undefined>>, dataDir: string, hostname = os.hostname()): string {
  const configured = env[hostIdVariable]?.trim();
  if (configured) return checkHostId(configured);
  const hash = createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 8);
  const host = hostname.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 60) || 'host';
  return `${host}-${hash}`;
}

/** The task queue of one host's worker. */
export function hostQueueName(taskQueue: string, hostId: string): string {
  return `${taskQueue}@${checkHostId(hostId)}`;
}

function checkHostId(id: string): string {
  if (!/^[A-Za-z0-9._:-]{1,100}$/.test(id)) {
    throw new Error(`Invalid host id ${JSON.stringify(id)} (${hostIdVariable}): use 1-100 letters, digits and . _ : - only.`);
  }
  return id;
}
