/**
 * Which command sequence a run follows (docs/VERSIONING.md). This worker runs one: `workflowVersion` (3), the
 * baseline that took every earlier patch without asking. A start without `workflowVersion` runs it too.
 */
import { ApplicationFailure } from '@temporalio/workflow';
import { workflowVersion } from './types.js';

/** The failure type of a run that names a version this worker does not run. */
export const UNKNOWN_WORKFLOW_VERSION = 'WorkflowVersionUnknown';

/**
 * A run that names another version fails at once, before any command: this worker would make commands the run's
 * own sequence does not (an older one was retired; a newer one belongs to a newer release). Non-retryable: no
 * retry of the same input on the same worker can succeed, and a failed run says why in its history.
 */
export function assertKnownVersion(version: number | undefined): void {
  if (version === undefined || version === workflowVersion) return;
  const fix = Number.isInteger(version) && version > workflowVersion
    ? `start it on a worker of the release that runs version ${String(version)}`
    : `start the run again without workflowVersion (versions before ${workflowVersion} were retired: docs/VERSIONING.md)`;
  throw ApplicationFailure.create({
    type: UNKNOWN_WORKFLOW_VERSION,
    message: `this worker runs workflow version ${workflowVersion} only, the run asks for version ${String(version)}: ${fix}`,
    nonRetryable: true,
  });
}
