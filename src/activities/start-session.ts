/** `startSession`: the run's ledger row and its sandbox (started, reattached, or borrowed from the parent run). */
import { ApplicationFailure } from '@temporalio/activity';
import { findDriver } from '../adapters/registry.js';
import { isBlobRef, previewOf, type TextRef } from '../blobs/index.js';
import { policyIsInteractive } from '../permissions/index.js';
import type { RunIdentity, SandboxRef } from '../sandbox/types.js';
import type { FrozenSpec } from '../spec/index.js';
import type { Deps } from './deps.js';
import { FailureTypes } from '../contracts/failures.js';
import { mapped } from './failures.js';
import { waitForLedger } from './ledger-wait.js';
import { prepareRepository } from './repository.js';
import type { RepositoryRequest, RunRepository } from '../contracts/repository.js';

export interface StartSessionInput {
  readonly workflowId: string;
  readonly runId: string;
  readonly specHash: string;
  readonly identity: RunIdentity;
  readonly task: TextRef;
  readonly parentWorkflowId?: string;
  readonly parentSandbox?: SandboxRef;
  /** The start input's repository (the agent's catalog block gives the rest, docs/repositories.md). */
  readonly repository?: RepositoryRequest;
}

/** What a started session hands the workflow. */
export interface StartedSession {
  readonly sandbox: SandboxRef;
  readonly task: TextRef;
  /** The run's repository, checked out in the sandbox's workspace (absent: a plain workspace). */
  readonly repository?: RunRepository;
}

/** Creates (or reattaches, or borrows the parent's) sandbox and the ledger row; a large task goes by reference. */
export async function startSession(deps: Deps, input: StartSessionInput): Promise<StartedSession> {
  const spec = await deps.loadSpec(input.specHash);
  const task = isBlobRef(input.task) ? input.task : await deps.checked(input.task);
  await waitForLedger(() =>
    deps.ledger.startRun({
      workflowId: input.workflowId,
      runId: input.runId,
      agent: spec.agent.name,
      harness: spec.harness.name,
      tenantId: input.identity.tenantId,
      userId: input.identity.userId,
      task: isBlobRef(input.task) ? previewOf(input.task) : input.task,
      parentWorkflowId: input.parentWorkflowId,
    }),
  );
  // What the posture becomes on this harness, for operators reading the run's record.
  const policy = spec.agent.permissions;
  const report = deps.adapters.has(spec.harness.driverClass) ? findDriver(deps.adapters, spec.harness.driverClass).permissions(policy.posture) : undefined;
  await waitForLedger(() =>
    deps.ledger.appendEvent(
      input.workflowId,
      0,
      'permissions',
      {
        posture: policy.posture,
        rules: { allow: policy.allow.length, deny: policy.deny.length, ask: policy.ask.length },
        gated: policyIsInteractive(policy),
        enforced: spec.agent.permissionsEnforced,
        note: !spec.agent.permissionsEnforced ? `advisory: harness "${spec.harness.name}" cannot ask before a tool runs` : report?.note,
      },
      input.runId,
    ),
  );
  if (spec.agent.sandbox.workspaceScope === 'parent') {
    if (!input.parentSandbox) {
      throw ApplicationFailure.nonRetryable(
        `Agent "${spec.agent.name}" has workspaceScope "parent", which only a sub-agent can use: run it as another agent's sub-agent, or give it another scope.`,
        FailureTypes.WorkspaceScopeInvalid,
      );
    }
    // A sub-agent in its parent's workspace works on the parent's branch: the parent delivers, once.
    if (input.repository) {
      throw ApplicationFailure.nonRetryable(`Agent "${spec.agent.name}" works in its parent's workspace (workspaceScope "parent"), on the parent's branch: it takes no repository of its own.`, FailureTypes.RepositoryInvalid);
    }
    return { sandbox: input.parentSandbox, task };
  }
  const sandbox = await startSandbox(deps, spec, input);
  const repository = await prepareRepository(deps, spec, { workflowId: input.workflowId, ...(input.repository ? { repository: input.repository } : {}) }, sandbox);
  return { sandbox, task, ...(repository ? { repository } : {}) };
}

/** Starts the agent's sandbox on this worker; a host-bound one records this worker's host queue. */
export async function startSandbox(deps: Deps, spec: FrozenSpec, input: { workflowId: string; runId: string; identity: RunIdentity }): Promise<SandboxRef> {
  const p = deps.provider(spec.agent.sandbox.provider);
  const ref = await mapped(() => p.start({ workflowId: input.workflowId, runId: input.runId, agent: spec.agent.name, identity: input.identity, spec: spec.agent.sandbox }));
  return p.hostBound && deps.hostQueue ? { ...ref, hostQueue: deps.hostQueue } : ref;
}
