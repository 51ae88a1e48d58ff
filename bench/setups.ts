/** Worker setups the benches compare: where the turn activity runs and how the harness is spawned. */
import { activityPlacements, type ActivityPlacement } from '../src/activity-worker.js';
import { spawnModes, type SpawnMode } from '../src/sandbox/spawner.js';

/** Where the turn activity runs and how it spawns the harness. */
export interface WorkerSetupChoice {
  readonly placement: ActivityPlacement;
  readonly spawn: SpawnMode;
}

export const setupLabel = (s: WorkerSetupChoice) => `${s.placement}/${s.spawn}`;

/** `inline/direct,process/thread` → setups. */
export function parseSetups(text: string): WorkerSetupChoice[] {
  return text.split(',').map((part) => {
    const [placement, spawn] = part.trim().split('/');
    if (!activityPlacements.includes(placement as ActivityPlacement) || !spawnModes.includes(spawn as SpawnMode)) {
      throw new Error(`worker setup "${part}": write PLACEMENT/SPAWN with PLACEMENT one of ${activityPlacements.join(', ')} and SPAWN one of ${spawnModes.join(', ')}`);
    }
    return { placement: placement as ActivityPlacement, spawn: spawn as SpawnMode };
  });
}

