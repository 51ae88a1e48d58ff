/** `reprovisionSession`: a fresh workspace for a run whose host is gone (`sandbox.onHostLoss: reprovision`). */
import type { RunIdentity, SandboxRef } from '../sandbox/types.js';
import type { Deps } from './deps.js';
import { startSandbox } from './start-session.js';
import { prepareRepository } from './repository.js';
import type { RunRepository } from '../contracts/repository.js';

export interface ReprovisionSessionInput {
  readonly workflowId: string;
  readonly runId: string;
  readonly specHash: string;
  readonly identity: RunIdentity;
  readonly lost: SandboxRef;
  readonly turn: number;
  readonly reason: string;
  /** The run's repository: checked out again at its base commit in the fresh workspace (the lost work tree's changes are gone with it). */
  readonly repository?: RunRepository;
}

/**
 * The worker holding the run's workspace is gone: a fresh workspace on this worker; the next turn replays the
 * conversation from the ledger. The lost workspace is not touched.
 */
export async function reprovisionSession(deps: Deps, input: ReprovisionSessionInput): Promise<SandboxRef> {
  const spec = await deps.loadSpec(input.specHash);
  const sandbox = await startSandbox(deps, spec, input);
  if (input.repository) await prepareRepository(deps, spec, { workflowId: input.workflowId, at: input.repository }, sandbox);
  await deps.ledger.appendEvent(input.workflowId, input.turn, 'host-lost', {
    lostHostQueue: input.lost.hostQueue ?? null,
    lostWorkspace: input.lost.hostWorkspacePath,
    hostQueue: sandbox.hostQueue ?? null,
    workspace: sandbox.hostWorkspacePath,
    reason: input.reason,
  });
  return sandbox;
}
