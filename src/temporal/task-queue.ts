/**
 * Who polls a task queue (DescribeTaskQueue), and what a worker's identity says about it: its process, its host
 * and the hash of the catalog it serves.
 */
import os from 'node:os';
import proto from '@temporalio/proto';

type WorkflowService = proto.temporal.api.workflowservice.v1.WorkflowService;
type Kind = 'workflow' | 'activity';

const { TaskQueueType, TaskQueueKind } = proto.temporal.api.enums.v1;

export interface Poller {
  readonly identity: string;
  /** When the server last saw this poller; it keeps listing stopped workers for about 5 minutes. */
  readonly lastAccessMs?: number;
  readonly kinds: readonly Kind[];
}

/** Workers polling the queue for workflow or activity tasks, one entry per identity. */
export async function taskQueuePollers(service: WorkflowService, namespace: string, taskQueue: string): Promise<Poller[]> {
  const byIdentity = new Map<string, { identity: string; lastAccessMs?: number; kinds: Kind[] }>();
  for (const [kind, type] of [
    ['workflow', TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW],
    ['activity', TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY],
  ] as const) {
    const response = await service.describeTaskQueue({ namespace, taskQueue: { name: taskQueue, kind: TaskQueueKind.TASK_QUEUE_KIND_NORMAL }, taskQueueType: type });
    for (const p of response.pollers ?? []) {
      const identity = p.identity ?? '';
      const seconds = p.lastAccessTime?.seconds;
      const lastAccessMs = seconds === undefined || seconds === null ? undefined : Number(seconds) * 1000 + Math.floor((p.lastAccessTime?.nanos ?? 0) / 1e6);
      const entry: { identity: string; lastAccessMs?: number; kinds: Kind[] } = byIdentity.get(identity) ?? { identity, kinds: [] };
      entry.kinds.push(kind);
      if (lastAccessMs !== undefined && (entry.lastAccessMs === undefined || lastAccessMs > entry.lastAccessMs)) entry.lastAccessMs = lastAccessMs;
      byIdentity.set(identity, entry);
    }
  }
  return [...byIdentity.values()];
}

const catalogMarker = /\bcatalog:([0-9a-f]{6,64})\b/;
const processMarker = /^(?:[^\s/]+\/)?(\d+)@(\S+)/;

/** A worker identity that says which process on which host serves which catalog: `durable-harness/PID@HOST catalog:HASH`. */
export function workerIdentity(catalogHash: string, base = `durable-harness/${process.pid}@${os.hostname()}`): string {
  return `${base} catalog:${catalogHash}`;
}

/** What an identity says: process id and host (the SDK's `PID@HOST` form), and the catalog hash if it is ours. */
export function parseIdentity(identity: string): { pid?: number; host?: string; catalog?: string } {
  const proc = processMarker.exec(identity);
  return { pid: proc ? Number(proc[1]) : undefined, host: proc?.[2], catalog: catalogMarker.exec(identity)?.[1] };
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Pollers that serve another catalog than ours. The server lists a stopped worker for minutes, so an entry from
 * this host whose process is gone (or is this very process, e.g. a restarted container) does not count.
 */
export function conflictingPollers(
  pollers: readonly Poller[],
  ourCatalog: string,
  here: { hostname: string; pid: number; alive: (pid: number) => boolean } = { hostname: os.hostname(), pid: process.pid, alive: processAlive },
): (Poller & { catalog: string })[] {
  const conflicts: (Poller & { catalog: string })[] = [];
  for (const p of pollers) {
    const { pid, host, catalog } = parseIdentity(p.identity);
    if (!catalog || catalog === ourCatalog) continue;
    if (host === here.hostname && pid !== undefined && (pid === here.pid || !here.alive(pid))) continue;
    conflicts.push({ ...p, catalog });
  }
  return conflicts;
}

/** How long after its last poll a worker still counts as polling: a long poll lasts up to a minute before it renews. */
export const pollerFreshMs = 90_000;

/**
 * Pollers that may be alive: seen within `pollerFreshMs` (the server lists a stopped worker for minutes), and not a
 * process of this host that is gone. A worker whose event loop is blocked, or that is frozen, still counts: it polls,
 * it is busy.
 */
export function livePollers(
  pollers: readonly Poller[],
  nowMs = Date.now(),
  here: { hostname: string; alive: (pid: number) => boolean } = { hostname: os.hostname(), alive: processAlive },
): Poller[] {
  return pollers.filter((p) => {
    if (p.lastAccessMs !== undefined && nowMs - p.lastAccessMs > pollerFreshMs) return false;
    const { pid, host } = parseIdentity(p.identity);
    return !(host === here.hostname && pid !== undefined && !here.alive(pid));
  });
}
