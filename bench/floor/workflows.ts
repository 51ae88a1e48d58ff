/** Temporal's floors for this loop: workflows whose turn is one regular activity and nothing else. */
import { ApplicationFailure, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { createFloorActivities } from './activities.js';
import type { BareTurnInput, createBareActivities } from './bare.js';

const { floorTurn } = proxyActivities<ReturnType<typeof createFloorActivities>>({ startToCloseTimeout: '1m', retry: { maximumAttempts: 1 } });
const { bareTurn } = proxyActivities<ReturnType<typeof createBareActivities>>({ startToCloseTimeout: '1m', retry: { maximumAttempts: 1 } });

/** One in-process turn of the project per activity: what Temporal costs around the project's own turn. */
export async function floorRun(input: { agent: string; task: string; maxTurns: number }): Promise<{ turns: number; lastStep: string }> {
  const { workflowId } = workflowInfo();
  for (let turn = 1; turn <= input.maxTurns; turn++) {
    const result = await floorTurn({ workflowId, agent: input.agent, task: input.task, turn });
    if (result.done) return { turns: turn, lastStep: result.step };
  }
  throw ApplicationFailure.nonRetryable(`floor run did not finish in ${input.maxTurns} turns`);
}

/** The bare wrapper: the same harness spawned and read to its end in one activity per turn, until it succeeds. */
export async function bareRun(input: Omit<BareTurnInput, 'turn' | 'sessionId' | 'prompt'> & { task: string; maxTurns: number }): Promise<{ turns: number; lastStep: string }> {
  const { maxTurns, task, ...harness } = input;
  let sessionId: string | undefined;
  for (let turn = 1; turn <= maxTurns; turn++) {
    const result = await bareTurn({ ...harness, turn, prompt: turn === 1 ? task : 'Continue.', ...(sessionId ? { sessionId } : {}) });
    sessionId = result.sessionId;
    if (result.step === 'success' || result.step === 'failed') return { turns: turn, lastStep: result.step };
  }
  throw ApplicationFailure.nonRetryable(`bare run did not finish in ${maxTurns} turns`);
}
