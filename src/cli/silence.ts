/**
 * Why nobody answered a run's query or update in time, told truthfully: no worker polls its task queue (exit 4), or
 * one does and did not answer — busy, or frozen (exit 6). A busy worker is not a missing one.
 */
import type { Client } from '@temporalio/client';
import { livePollers, taskQueuePollers } from '../temporal/task-queue.js';
import { CliError, ExitCodes } from './exit-codes.js';

export interface Silence {
  readonly namespace: string;
  readonly address: string;
  /** The run's task queue. */
  readonly taskQueue: string;
  /** What got no answer, e.g. `run X is open but its status query got no answer`. */
  readonly what: string;
}

/** `what`: no worker polls the task queue, and how to start one. */
export function noWorkerMessage({ namespace, address, taskQueue, what }: Silence): string {
  return (
    `${what}: no worker polls task queue "${taskQueue}" in namespace "${namespace}" at ${address}. ` +
    'Start one (`durable-harness worker`, or `durable-harness dev` for a local stack), or check --task-queue / DURABLE_HARNESS_TASK_QUEUE.'
  );
}

/** The error to end with after `waitedMs` without an answer: busy when a worker polls the run's queue, else no worker. */
export async function silentWorker(client: Pick<Client, 'workflowService'>, silence: Silence & { readonly waitedMs: number }): Promise<CliError> {
  const { namespace, taskQueue, what, waitedMs } = silence;
  const pollers = livePollers(await taskQueuePollers(client.workflowService, namespace, taskQueue)).filter((p) => p.kinds.includes('workflow'));
  if (pollers.length === 0) return new CliError(`${noWorkerMessage(silence)} The run goes on when a worker takes it.`, ExitCodes.noWorker);
  const lastPoll = Math.max(...pollers.map((p) => p.lastAccessMs ?? Date.now()));
  const polls = pollers.length === 1 ? '1 worker polls' : `${pollers.length} workers poll`;
  return new CliError(
    `${what}: the worker did not answer within ${Math.round(waitedMs / 1000)} s (busy): ${polls} task queue "${taskQueue}" ` +
      `(last poll ${Math.max(0, Math.round((Date.now() - lastPoll) / 1000))} s ago). The run goes on; try again in a moment, or see what keeps the worker busy (a turn flooding it, a frozen process).`,
    ExitCodes.busy,
  );
}
