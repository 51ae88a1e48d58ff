/**
 * Which command sequence a run follows (docs/VERSIONING.md). This worker runs one: `workflowVersion` (3), the
 * baseline that took every earlier patch without asking. A start without `workflowVersion` runs it too.
 */
import { ApplicationFailure } from '@temporalio/workflow';
import { workflowVersion } from './types.js';

/** The failure type of a run that names a version this worker does not run. */
export const UNKNOWN_WORKFLOW_VERSION = 'WorkflowVersionUnknown';

/**
 * A run that names another version makes no command here: this worker would make commands the run's own sequence
 * does not. A newer version belongs to a newer release mid-deploy: the workflow task fails (a plain error, which
 * Temporal retries) and the run waits, unharmed, for a worker that runs it. An older one was retired: the run fails
 * at once, non-retryable, saying how to start it again.
 */
export function assertKnownVersion(version: number | undefined): void {
  if (version === undefined || version === workflowVersion) return;
  if (Number.isInteger(version) && version > workflowVersion) {
    throw new Error(`this worker runs workflow version ${workflowVersion}, the run asks for version ${String(version)}: deploy the newer worker (the run waits for it)`);
  }
  throw ApplicationFailure.create({
    type: UNKNOWN_WORKFLOW_VERSION,
    message: `this worker runs workflow version ${workflowVersion} only, the run asks for version ${String(version)}: start the run again without workflowVersion (versions before ${workflowVersion} were retired: docs/VERSIONING.md)`,
    nonRetryable: true,
  });
}
