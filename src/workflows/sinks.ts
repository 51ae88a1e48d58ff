/**
 * The workflow's calls out to the worker process that runs it (Temporal sinks: fire and forget, not in history,
 * not called on replay). The worker side is in src/worker.ts (`durableHarnessPlugin`).
 */
import type { Sinks } from '@temporalio/workflow';

export interface DurableHarnessSinks extends Sinks {
  turnStops: {
    /** The run cancels its in-flight turn (a cancel, Temporal's cancel request, the wall-time guardrail): kill it now if it runs here. */
    requested(reason: string): void;
  };
}
