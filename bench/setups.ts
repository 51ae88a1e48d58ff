/** Worker setups the benches compare: where the turn activity runs. */
import { activityPlacements, type ActivityPlacement } from '../src/activity-worker.js';

/** Where the turn activity runs. */
export interface WorkerSetupChoice {
  readonly placement: ActivityPlacement;
  /** Placement `process`: turns the workflow worker keeps for eager dispatch (default: the project's). */
  readonly eagerTurnSlots?: number;
}

export const setupLabel = (s: WorkerSetupChoice) => `${s.placement}${s.eagerTurnSlots !== undefined ? `:${s.eagerTurnSlots}` : ''}`;

/** `inline,process,process:0` → setups (`:N` = eager turn slots for `process`). */
export function parseSetups(text: string): WorkerSetupChoice[] {
  return text.split(',').map((part) => {
    const match = /^(\w+)(?::(\d+))?$/.exec(part.trim());
    const [, placement, slots] = match ?? [];
    if (!activityPlacements.includes(placement as ActivityPlacement)) {
      throw new Error(`worker setup "${part}": write PLACEMENT[:EAGER_SLOTS] with PLACEMENT one of ${activityPlacements.join(', ')}`);
    }
    return { placement: placement as ActivityPlacement, ...(slots !== undefined ? { eagerTurnSlots: Number(slots) } : {}) };
  });
}
