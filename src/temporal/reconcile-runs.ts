/**
 * Runs Temporal closed without the workflow's own `endSession` (terminated, timed out) stay open in the ledger.
 * At start a worker closes them there (issue 8): the ledger row says what became of the run, its pending approvals
 * expire. Their containers go with the container reaper (`reapClosedRunContainers`), which asks Temporal the same.
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
    const reason = `the workflow was ${status === 'terminated' ? 'terminated' : 'timed out'} in Temporal; closed by a worker at start`;
    try {
      await ledger.appendEvent(run.workflowId, 0, 'end', { status, reason }, run.runId);
      await ledger.expireApprovals(run.workflowId, `run ${status}`, undefined, run.runId);
      await ledger.finishRun(run.workflowId, status, { status, reason }, run.runId);
      closed.push({ workflowId: run.workflowId, status });
    } catch (err) {
      log(`could not close ${run.workflowId} in the ledger: ${(err as Error).message}`);
    }
  }
  return closed;
}
