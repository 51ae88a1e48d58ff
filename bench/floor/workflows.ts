/** Temporal's floor for this loop: a workflow whose turn is one regular activity and nothing else. */
import { ApplicationFailure, proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { createFloorActivities } from './activities.js';

const { floorTurn } = proxyActivities<ReturnType<typeof createFloorActivities>>({ startToCloseTimeout: '1m', retry: { maximumAttempts: 1 } });

export async function floorRun(input: { agent: string; task: string; maxTurns: number }): Promise<{ turns: number; lastStep: string }> {
  const { workflowId } = workflowInfo();
  for (let turn = 1; turn <= input.maxTurns; turn++) {
    const result = await floorTurn({ workflowId, agent: input.agent, task: input.task, turn });
    if (result.done) return { turns: turn, lastStep: result.step };
  }
  throw ApplicationFailure.nonRetryable(`floor run did not finish in ${input.maxTurns} turns`);
}
