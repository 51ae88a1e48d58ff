/** The actions the workflow approved, run inside the turn that reports their results to the harness. */
import { Context } from '@temporalio/activity';
import type { ActionCall } from '../../contracts/envelope.js';
import type { SandboxFs } from '../../sandbox/types.js';
import type { ActionOutcome } from '../../workflows/types.js';
import type { Deps } from '../deps.js';
import type { ProgressEvents } from './progress-events.js';
import { waitForLedger } from '../ledger-wait.js';
import { redactDeep, type Redactor } from '../redaction.js';

export interface ActionRun {
  readonly workflowId: string;
  readonly specHash: string;
  readonly call: ActionCall;
  readonly seq: number;
  readonly turn: number;
}

/**
 * Runs one action at most once per (workflow, seq): its start is recorded before it runs, its outcome after; a
 * retried attempt reuses a recorded outcome and never runs a started action again. Actions get the sandbox's `fs`
 * (files where the sandbox is, links never followed), never a host path; what they return comes from the
 * workspace, which the harness writes, so it is redacted like harness output.
 */
/** `events`: the attempt's progress events (best effort): the action's outcome for the run's followers. */
export async function runAction(deps: Deps, input: ActionRun, fs: SandboxFs, redact: Redactor, events?: Pick<ProgressEvents, 'append'>): Promise<ActionOutcome> {
  const spec = await deps.loadSpec(input.specHash);
  const type = `action:${input.call.name}`;
  const earlier = await waitForLedger(() => deps.ledger.getStep(input.workflowId, input.seq));
  const interrupted: ActionOutcome = { ok: false, error: `action "${input.call.name}" was started by an earlier, interrupted attempt of this turn; its outcome is unknown and it was not run again` };
  if (earlier) return (earlier.payload as { outcome?: ActionOutcome }).outcome ?? interrupted;
  const call = redactDeep(input.call, redact);
  const { inserted } = await waitForLedger(() => deps.ledger.recordStep({ workflowId: input.workflowId, seq: input.seq, turn: input.turn, type, payload: { call } }));
  if (!inserted) return interrupted;
  const config = spec.actions.find((a) => a.name === input.call.name);
  const def = config && deps.actions.get(config.implementation);
  let outcome: ActionOutcome;
  if (!config || !def) {
    outcome = { ok: false, error: `action "${input.call.name}" has no implementation on this worker` };
  } else {
    const parsed = def.parameters.safeParse(input.call.params);
    if (!parsed.success) {
      outcome = { ok: false, error: `invalid parameters: ${parsed.error.message}` };
    } else {
      try {
        const output = await def.execute(parsed.data, {
          workflowId: input.workflowId,
          agent: spec.agent.name,
          fs,
          settings: config.settings,
          signal: Context.current().cancellationSignal,
        });
        outcome = { ok: true, output };
      } catch (err) {
        outcome = { ok: false, error: err instanceof Error ? err.message : String(err) };
      }
    }
  }
  outcome = redactDeep(outcome, redact);
  await waitForLedger(() => deps.ledger.completeStep(input.workflowId, input.seq, { call, outcome }));
  // For the run's followers (run.events(), `logs`): the action and whether it worked, not its output.
  const error = outcome.ok ? {} : { error: (outcome.error ?? '').slice(0, 1000) };
  events?.append('action', { seq: input.seq, action: call.name, ok: outcome.ok, ...error });
  return outcome;
}
