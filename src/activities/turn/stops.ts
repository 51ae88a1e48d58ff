/**
 * Stops a running turn the moment its workflow decides to cancel it, without waiting for Temporal to tell the turn:
 * the workflow calls a sink (`turnStops.requested`, src/workflows/sinks.ts: outside history, not called on replay),
 * and where that workflow task runs on the worker process that runs the turn — one host always, and a run's own host
 * under host affinity — the turn's harness is killed at once. Temporal's cancellation still ends the activity: it
 * reaches the turn with its next heartbeat response (`heartbeatThrottle`), which is also how a cancel reaches a turn
 * on another host.
 */

/** The turns running on this process, by the workflow execution they belong to. */
export class TurnStops {
  private readonly turns = new Map<string, Set<(reason: string) => void>>();

  /** Registers a running turn's stop; call the returned function when the turn ends. */
  register(workflowId: string, runId: string, stop: (reason: string) => void): () => void {
    const key = keyOf(workflowId, runId);
    let set = this.turns.get(key);
    if (!set) this.turns.set(key, (set = new Set()));
    set.add(stop);
    return () => {
      set.delete(stop);
      if (set.size === 0) this.turns.delete(key);
    };
  }

  /** The run decided to cancel its turn: stops each of its turns running here; how many there were. */
  stop(workflowId: string, runId: string, reason: string): number {
    const set = this.turns.get(keyOf(workflowId, runId));
    for (const stop of set ?? []) stop(reason);
    return set?.size ?? 0;
  }
}

const keyOf = (workflowId: string, runId: string) => `${workflowId}\n${runId}`;
