/** The harness's reply as a step: parsed against the frozen rules, recorded, and shaped as the workflow keeps it. */
import { formatFeedback, parseEnvelope } from '../../envelope/index.js';
import type { FrozenSpec } from '../../spec/index.js';
import { actionsStepView, boundedName } from '../../workflows/bounds.js';
import type { StepValidation, StepView } from '../../workflows/types.js';
import type { Deps } from '../deps.js';
import type { ProgressEvents } from './progress-events.js';
import { waitForLedger } from '../ledger-wait.js';
import { redactDeep, type Redactor } from '../redaction.js';

/**
 * Parses the envelope against the frozen rules and records the step: the step and per-call parameter problems, or the
 * problem. Parsing decodes the envelope's JSON (a key spelled `\u0073k-…` becomes the key), so what it yields is
 * redacted again.
 */
/** `events`: the attempt's progress events (best effort, off the turn's path): the step, once, for the run's followers. */
export async function validateStep(deps: Deps, input: { workflowId: string; turn: number; seq: number; text: string; spec: FrozenSpec }, redact: Redactor, events?: Pick<ProgressEvents, 'append'>): Promise<StepValidation> {
  const parsed = redactDeep(parseEnvelope(input.text, input.spec.envelopeRules), redact);
  const overCap = parsed.ok ? undefined : parsed.actionsOverCap;
  const type = parsed.ok ? `step:${parsed.step.step}` : overCap ? 'actions-over-cap' : 'malformed-envelope';
  const { inserted } = await waitForLedger(() =>
    deps.ledger.recordStep({
      workflowId: input.workflowId,
      seq: input.seq,
      turn: input.turn,
      type,
      payload: parsed.ok ? { step: parsed.step, actionErrors: parsed.actionErrors } : { problem: parsed.problem, ...overCap },
    }),
  );
  // For the run's followers (run.events(), `logs`): once, however often the turn is retried; queued like every progress
  // event, so a ledger that cannot take events never stalls or fails the turn.
  if (inserted) events?.append('step', { seq: input.seq, step: type });
  if (overCap) await waitForLedger(() => deps.ledger.appendEvent(input.workflowId, input.turn, 'actions-over-cap', overCap));
  if (!parsed.ok) return { ok: false, problem: parsed.problem, feedback: formatFeedback(parsed.problem) };
  // Only parameter problems: which actions and sub-agents are allowed is the workflow's decision (planActions).
  const problems: (string | undefined)[] = parsed.step.step === 'actions' ? parsed.step.actions.map(() => undefined) : [];
  for (const e of parsed.actionErrors) if (e.kind === 'invalid-params') problems[e.index] = e.problem;
  return { ok: true, step: parsed.step, actionProblems: problems };
}

/**
 * The step as the workflow keeps it: large texts by reference, parameters left in the ledger, and every name and
 * problem the harness made bounded (workflows/bounds.ts): the envelope's calls are capped already.
 */
export async function viewOf(deps: Deps, validation: Extract<StepValidation, { ok: true }>, rules: FrozenSpec['envelopeRules']): Promise<StepView> {
  const step = validation.step;
  switch (step.step) {
    case 'success':
      return { step: 'success', result: await deps.checked(step.result) };
    case 'failed':
      return { step: 'failed', reason: await deps.checked(step.reason) };
    case 'chat':
      return { step: 'chat', message: await deps.checked(step.message) };
    case 'sub-agent':
      return { step: 'sub-agent', agent: boundedName(step.agent, (n) => rules.allowedSubAgents.includes(n)), message: await deps.checked(step.message), terminateAfter: step.terminateAfter };
    case 'actions':
      return actionsStepView(step, validation.actionProblems, (n) => Object.prototype.hasOwnProperty.call(rules.allowedActions, n));
  }
}
