/**
 * One run at a time in a shared workspace (`workspaceScope: agent` or `agent-user`): two runs of one scope would
 * otherwise work in one directory at once, each seeing the other's half-written files and harness session store.
 * The claim is a ledger row (`Ledger.claimWorkspace`), so it holds across worker processes and hosts; the run's end
 * (`endSession`) gives it up, and a holder whose run is closed in the ledger (ended, or reconciled after a
 * terminate) loses it to the next claimant.
 *
 * `sandbox.concurrentRuns: wait` (default): the turn waits, heartbeating, and says so in its progress (`status`
 * shows "waiting for the shared workspace …: run X works in it"); near the attempt's deadline it fails retryably
 * (`WorkspaceBusy`) and Temporal tries again, so after the agent's turn attempts an operator decides. `refuse`: the run
 * fails at once with `WorkspaceBusy`.
 */
import { ApplicationFailure } from '@temporalio/activity';
import type { Ledger, WorkspaceHolder } from '../ledger/types.js';
import type { SandboxRef, WorkspaceScope } from '../sandbox/types.js';
import { FailureTypes } from '../contracts/failures.js';

/** How a second run of a shared workspace is treated. */
export type ConcurrentRuns = 'wait' | 'refuse';

/** Scopes whose workspace several runs use; a sub-agent in its parent's workspace works under the parent's claim. */
const sharedScopes: ReadonlySet<WorkspaceScope> = new Set(['agent', 'agent-user']);

/** The claim's key: the workspace on its host (two hosts' directories of one scope are two workspaces). */
export function workspaceKey(sandbox: SandboxRef): string {
  return `${sandbox.provider}:${sandbox.hostQueue ?? ''}:${sandbox.hostWorkspacePath}`;
}

export interface ClaimOptions {
  readonly ledger: Ledger;
  readonly scope: WorkspaceScope;
  readonly mode: ConcurrentRuns;
  readonly sandbox: SandboxRef;
  readonly holder: WorkspaceHolder;
  /** Give up (retryably) at this time; undefined: wait until cancelled. */
  readonly deadlineMs?: number;
  readonly signal: AbortSignal;
  /** Called while waiting, with what to show (and once more with `undefined` when the wait is over). */
  readonly onWait: (detail: string | undefined, holder: WorkspaceHolder) => void;
  readonly pollMs?: number;
}

/** Claims the run's shared workspace, waiting or refusing as configured; a no-op for unshared scopes. */
export async function claimSharedWorkspace(options: ClaimOptions): Promise<void> {
  if (!sharedScopes.has(options.scope)) return;
  const key = workspaceKey(options.sandbox);
  let waited = false;
  for (;;) {
    const holder = await options.ledger.claimWorkspace(key, options.holder);
    if (holder.workflowId === options.holder.workflowId) {
      if (waited) options.onWait(undefined, holder);
      return;
    }
    const detail = `waiting for the shared workspace ${options.sandbox.hostWorkspacePath}: run ${holder.workflowId} works in it`;
    if (options.mode === 'refuse') {
      throw ApplicationFailure.nonRetryable(
        `the shared workspace ${options.sandbox.hostWorkspacePath} (scope ${options.scope}) is in use by run ${holder.workflowId}; ` +
          'this agent refuses concurrent runs of one workspace (sandbox.concurrentRuns: refuse). Start it again when that run has ended, or set concurrentRuns: wait.',
        FailureTypes.WorkspaceBusy,
        { holder },
      );
    }
    if (options.deadlineMs !== undefined && Date.now() > options.deadlineMs) {
      throw ApplicationFailure.retryable(`${detail}; still busy at the end of this attempt`, FailureTypes.WorkspaceBusy, { holder });
    }
    options.onWait(detail, holder);
    waited = true;
    await pause(options.pollMs ?? 1000, options.signal);
  }
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason as Error);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
