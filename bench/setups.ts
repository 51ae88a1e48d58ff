/** Worker setups the benches compare: where the turn activity runs and how the harness is spawned. */
import { activityPlacements, type ActivityPlacement } from '../src/activity-worker.js';
import { spawnModes, type SpawnMode } from '../src/sandbox/spawner.js';

/** Where the turn activity runs and how it spawns the harness. */
export interface WorkerSetupChoice {
  readonly placement: ActivityPlacement;
  readonly spawn: SpawnMode;
  /** Placement `process`: turns the workflow worker keeps for eager dispatch (default: the project's). */
  readonly eagerTurnSlots?: number;
}

export const setupLabel = (s: WorkerSetupChoice) => `${s.placement}${s.eagerTurnSlots !== undefined ? `:${s.eagerTurnSlots}` : ''}/${s.spawn}`;

/** `inline/direct,process/thread,process:0/direct` → setups (`:N` = eager turn slots for `process`). */
export function parseSetups(text: string): WorkerSetupChoice[] {
  return text.split(',').map((part) => {
    const match = /^(\w+)(?::(\d+))?\/(\w+)$/.exec(part.trim());
    const [, placement, slots, spawn] = match ?? [];
    if (!activityPlacements.includes(placement as ActivityPlacement) || !spawnModes.includes(spawn as SpawnMode)) {
      throw new Error(`worker setup "${part}": write PLACEMENT[:EAGER_SLOTS]/SPAWN with PLACEMENT one of ${activityPlacements.join(', ')} and SPAWN one of ${spawnModes.join(', ')}`);
    }
    return { placement: placement as ActivityPlacement, spawn: spawn as SpawnMode, ...(slots !== undefined ? { eagerTurnSlots: Number(slots) } : {}) };
  });
}

