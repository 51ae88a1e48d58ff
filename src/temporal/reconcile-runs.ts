/**
 * Runs Temporal closed without the workflow's own `endSession` (terminated, timed out) stay open in the ledger.
 * Workers close them there at start (issue 8) and every minute while they run (issue 18: a terminated run's row
 * stayed `running` until some worker started): the ledger row says what became of the run, its pending approvals
 * expire, its shared-workspace claims go. Their containers go with the container reaper (`reapClosedRunContainers`),
 * which asks Temporal the same.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Ledger, RunStatus } from '../ledger/types.js';

/** What Temporal's closed statuses that skip `endSession` become in the ledger. */
const closedWithoutEnd: Readonly<Record<string, RunStatus>> = { TERMINATED: 'terminated', TIMED_OUT: 'timed_out' };

/** Closes the ledger rows of runs Temporal terminated or timed out; returns them. Never throws for one run. */
export async function reconcileClosedRuns(ledger: Ledger, client: Client, log: (line: string) => void = () => undefined): Promise<{ workflowId: string; status: RunStatus }[]> {
  const closed: { workflowId: string; status: RunStatus }[] = [];
  for (const run of await ledger.listOpenRuns(1000)) {
    let temporalStatus: string;
    try {
      temporalStatus = (await client.workflow.getHandle(run.workflowId).describe()).status.name;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) log(`could not ask Temporal about ${run.workflowId}: ${(err as Error).message}`);
      continue;
    }
    const status = closedWithoutEnd[temporalStatus];
    if (!status) continue;
    const reason = `the workflow was ${status === 'terminated' ? 'terminated' : 'timed out'} in Temporal; closed by a worker's reconciliation`;
    try {
      await ledger.appendEvent(run.workflowId, 0, 'end', { status, reason }, run.runId);
      await ledger.expireApprovals(run.workflowId, `run ${status}`, undefined, run.runId);
      await ledger.finishRun(run.workflowId, status, { status, reason }, run.runId);
      await ledger.releaseWorkspacesOf(run.workflowId);
      closed.push({ workflowId: run.workflowId, status });
    } catch (err) {
      log(`could not close ${run.workflowId} in the ledger: ${(err as Error).message}`);
    }
  }
  return closed;
}

/** How often a running worker reconciles (`createWorker({ reconcileIntervalMs })`; 0 turns it off). */
export const defaultReconcileIntervalMs = 60_000;

/**
 * Reconciles every `intervalMs` until stopped; one round at a time (a slow Temporal or ledger never stacks rounds).
 * Returns the stop function. Failures are logged, never thrown: the next round tries again.
 */
export function reconcilePeriodically(
  ledger: Ledger,
  client: Client,
  intervalMs: number,
  log: (line: string) => void = () => undefined,
): () => void {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const round = async () => {
    try {
      const closed = await reconcileClosedRuns(ledger, client, log);
      if (closed.length) log(`closed ${closed.length} run(s) Temporal terminated or timed out in the ledger: ${closed.map((r) => `${r.workflowId} (${r.status})`).join(', ')}`);
    } catch (err) {
      log(`reconciling closed runs failed (tried again in ${intervalMs} ms): ${(err as Error).message}`);
    }
    if (!stopped) timer = setTimeout(() => void round(), intervalMs);
  };
  timer = setTimeout(() => void round(), intervalMs);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
