/** `openRun`: a run's start in one local-activity round (workflow version 2): `resolveAgent`, then `startSession`. */
import { ApplicationFailure } from '@temporalio/activity';
import type { RunPolicy } from '../spec/index.js';
import type { OpenRunFailure } from '../workflows/types.js';
import type { Deps } from './deps.js';
import { resolveAgent, type ResolveAgentInput } from './resolve-agent.js';
import { startSession, type StartedSession, type StartSessionInput } from './start-session.js';

export type OpenRunInput = Omit<StartSessionInput, 'specHash'> & ResolveAgentInput;

/**
 * When the session fails to start after the agent resolved, the failure carries the policy (`OpenRunFailure`), so
 * the run still ends the record and whatever part of the session began.
 */
export async function openRun(deps: Deps, input: OpenRunInput): Promise<StartedSession & { policy: RunPolicy }> {
  const { agent, budget, ...start } = input;
  const policy = await resolveAgent(deps, { agent, budget });
  try {
    return { policy, ...(await startSession(deps, { ...start, specHash: policy.specHash })) };
  } catch (err) {
    const failure = err instanceof ApplicationFailure ? err : undefined;
    throw ApplicationFailure.create({
      message: err instanceof Error ? err.message : String(err),
      type: failure?.type ?? (err instanceof Error ? err.name : 'Error'),
      nonRetryable: failure?.nonRetryable ?? false,
      details: [{ policy } satisfies OpenRunFailure],
      cause: err instanceof Error ? err : undefined,
    });
  }
}
