/**
 * The floor's one activity per turn: exactly the work of one in-process turn (bench/in-process.ts), so the
 * floor workflow differs from the in-process loop only by Temporal's own cost of a regular activity per turn.
 */
import type { createActivities } from '../../src/activities/index.js';
import { InProcessRun } from '../in-process.js';

export interface FloorTurnInput {
  readonly workflowId: string;
  readonly agent: string;
  readonly task: string;
  readonly turn: number;
}

export function createFloorActivities(activities: ReturnType<typeof createActivities>) {
  // A run's state stays in this process between its turns (the bench has one worker); the workflow carries
  // the turn number and the step the harness took, as a real turn's small result would.
  const runs = new Map<string, InProcessRun>();
  return {
    async floorTurn(input: FloorTurnInput): Promise<{ done: boolean; step: string }> {
      let run = runs.get(input.workflowId);
      if (!run) runs.set(input.workflowId, (run = new InProcessRun(activities, input.workflowId, input.agent, input.task)));
      if (run.turns + 1 !== input.turn) throw new Error(`floor run ${input.workflowId}: turn ${input.turn} after ${run.turns}`);
      const result = await run.turn();
      if (result.done) runs.delete(input.workflowId);
      return result;
    },
  };
}
