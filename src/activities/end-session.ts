/** `endSession`: the run's compensation, on every exit path. */
import type { RunStatus } from '../ledger/types.js';
import type { SandboxRef } from '../sandbox/types.js';
import type { AgentRunResult, RunOutcome } from '../workflows/types.js';
import type { Deps } from './deps.js';
import { mapped } from './failures.js';
import { waitForLedger } from './ledger-wait.js';
import { removeRunGitDir } from './repository.js';

export interface EndSessionInput {
  readonly workflowId: string;
  readonly sandbox?: SandboxRef;
  readonly releaseSandbox: boolean;
  readonly status: RunOutcome;
  readonly result: AgentRunResult;
  /** Run only on the worker of this host queue (a pinned run's end, tried as a local activity first). */
  readonly onlyOnHost?: string;
}

/** What `endSession` did: `elsewhere` when it was asked to run only on another host and did nothing. */
export interface EndSessionOutcome {
  readonly elsewhere: boolean;
}

/**
 * Ends the sandbox (unless borrowed from a parent) and closes the ledger row. Idempotent. With `onlyOnHost` it does
 * nothing unless this worker is that host, and says so: the workflow then ends the session on the host queue.
 */
export async function endSession(deps: Deps, input: EndSessionInput): Promise<EndSessionOutcome> {
  if (input.onlyOnHost !== undefined && input.onlyOnHost !== deps.hostQueue) return { elsewhere: true };
  const sandbox = input.sandbox;
  // The run's gateway first: its placeholder is forgotten, nothing in the sandbox reaches the vendor any more.
  await deps.gateways.closeRun(input.workflowId);
  if (sandbox && input.releaseSandbox) {
    await mapped(() => deps.provider(sandbox.provider).end(sandbox));
    // A run on a repository: its git directory goes with its workspace (the deliverable is in the ledger, or pushed).
    removeRunGitDir(deps, input.workflowId);
  }
  // The next run of a shared workspace may start (workspace-claim.ts); idempotent.
  await waitForLedger(() => deps.ledger.releaseWorkspacesOf(input.workflowId));
  // Its effect happens once: a re-run (a retried attempt, a replayed workflow task after a crash) finds the run
  // already closed and writes nothing again.
  const run = await waitForLedger(() => deps.ledger.getRun(input.workflowId));
  if (run?.finishedAt !== undefined) return { elsewhere: false };
  await waitForLedger(() => deps.ledger.appendEvent(input.workflowId, input.result.iterations, 'end', { status: input.status, reason: input.result.reason, failureType: input.result.failureType }));
  await waitForLedger(() => deps.ledger.expireApprovals(input.workflowId, `run ${input.status}`));
  await waitForLedger(() => deps.ledger.finishRun(input.workflowId, input.status satisfies RunStatus, input.result));
  return { elsewhere: false };
}
