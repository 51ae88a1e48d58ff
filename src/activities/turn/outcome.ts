/**
 * What a turn attempt's last harness run comes to: a result for the workflow (the step, the spend, the session), or
 * the failure to throw. Each outcome closes the run's prompt run with what became of it.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { FrozenSpec } from '../../spec/index.js';
import { replyTooLargeProblem } from '../../contracts/prompts.js';
import { MAX_HARNESS_MESSAGE_CHARS, MAX_SESSION_ID_CHARS, MAX_TURN_PROBLEM_CHARS, clipText as clip } from '../../workflows/bounds.js';
import type { TurnResult, TurnSpend } from '../../workflows/types.js';
import type { Deps } from '../deps.js';
import { FailureTypes } from '../../contracts/failures.js';
import { waitForLedger } from '../ledger-wait.js';
import type { Redactor } from '../redaction.js';
import type { Attempt, TurnRun } from './attempt.js';
import type { HarnessRun } from './drive.js';
import { resultOf } from './spend.js';
import { validateStep, viewOf } from './step.js';

/** How much of a refused (too large) reply the ledger keeps. */
const KEPT_REPLY_CHARS = 64 * 1024;

export interface Ending {
  readonly deps: Deps;
  readonly spec: FrozenSpec;
  readonly req: TurnRun;
  readonly attempt: Attempt;
  readonly run: HarnessRun;
  readonly redact: Redactor;
  /** Set when the harness had forgotten the session and this run is the fresh one. */
  readonly resumeFailed?: string;
  readonly permissionsOverCap?: { cap: number; denied: number };
}

export async function outcomeOf(ending: Ending): Promise<TurnResult> {
  const { deps, spec, req, attempt, run, redact, resumeFailed, permissionsOverCap } = ending;
  const ctx = Context.current();
  const { events, spent } = attempt;
  const finish = (f: Parameters<Attempt['finish']>[1]) => attempt.finish(run, f);
  const turn = run.turn!;
  const reportedSession = turn.sessionId ?? run.sessionId;
  // The session id travels in every later turn's request: one no real harness would report is not kept.
  const sessionId = reportedSession !== undefined && reportedSession.length > MAX_SESSION_ID_CHARS ? undefined : reportedSession;
  if (sessionId !== reportedSession) events.append('session-id-too-long', { characters: reportedSession!.length, limit: MAX_SESSION_ID_CHARS });
  // The session id only when it changed: a steady resumed session costs no bytes of history per turn.
  const session = sessionId && sessionId !== req.resumeSessionId ? { externalSessionId: sessionId } : {};
  if (await attempt.cancelled()) {
    await finish({ status: 'cancelled', outputUsed: false, output: '', error: 'cancelled' });
    throw ctx.cancellationSignal.reason ?? new Error('turn cancelled');
  }
  if (attempt.stoppedHere()) {
    // Stopped for a cancel Temporal never delivered: a failed attempt, retried like any other.
    const reason = attempt.signal.reason as Error;
    await finish({ status: 'failed', outputUsed: false, output: '', error: reason.message });
    throw reason;
  }
  if (run.crossing) {
    await finish({ status: 'budget-exhausted', outputUsed: false, output: '', error: run.crossing.reason });
    return {
      ...resultOf(spent(), run),
      ...session,
      budgetExhausted: { guardrail: run.crossing.guardrail, message: run.crossing.reason },
      step: { ok: false, problem: run.crossing.reason },
    };
  }
  if (turn.error) {
    const message = clip(redact(turn.error.message), MAX_HARNESS_MESSAGE_CHARS);
    await finish({ status: turn.error.code === 'resume-failed' ? 'resume-failed' : 'failed', outputUsed: false, output: '', error: message });
    throw harnessFailure(turn.error, redact, spent());
  }
  // A turn that ran and reported no usage at all spent tokens nobody counted: its cost is blind.
  const usageMissing = turn.usageEvents === 0;
  const reply = redact(turn.text ?? '');
  const bytes = Buffer.byteLength(reply, 'utf8');
  const limit = spec.harness.maxReplyBytes;
  const tooLarge = bytes > limit;
  const output = tooLarge ? `${reply.slice(0, KEPT_REPLY_CHARS)}\n[durable-harness: reply of ${bytes} bytes refused at the limit of ${limit}; only its opening is kept]` : reply;
  await finish({ status: 'succeeded', outputUsed: true, output, usageMissing });
  // Requests of this turn still pending came from an earlier attempt whose harness no longer asks them.
  // Nobody waits for them and the run's end expires them anyway, so this never holds up the turn.
  events.write(() => deps.ledger.expireApprovals(req.workflowId, 'turn ended without asking it again', req.turn, req.runId));
  if (sessionId) events.write(() => deps.ledger.setExternalSessionId(req.workflowId, sessionId, req.runId));
  const result = {
    ...resultOf(spent(usageMissing), run),
    ...session,
    ...(resumeFailed !== undefined ? { resumeFailed } : {}),
    ...(permissionsOverCap ? { permissionRequestsOverCap: permissionsOverCap } : {}),
  };
  if (tooLarge) {
    const problem = replyTooLargeProblem(bytes, limit);
    await waitForLedger(() => deps.ledger.recordStep({ workflowId: req.workflowId, seq: req.envelopeSeq, turn: req.turn, type: 'reply-too-large', payload: { bytes, limit } }));
    events.append('reply-too-large', { bytes, limit });
    ctx.log.warn(`turn ${req.turn} of ${req.workflowId}: ${problem}`);
    return { ...result, step: { ok: false, problem, tooLarge: true } };
  }
  const validation = await validateStep(deps, { workflowId: req.workflowId, turn: req.turn, seq: req.envelopeSeq, text: reply, spec }, redact, events);
  if (!validation.ok) return { ...result, step: { ok: false, problem: clip(validation.problem, MAX_TURN_PROBLEM_CHARS) } };
  return { ...result, step: { ok: true, view: await viewOf(deps, validation, spec.envelopeRules) } };
}

/** The failure of a turn whose harness reported an error, keyed on the error's code. */
function harnessFailure(error: { code: string; message: string; exitCode?: number | null; stderrTail?: string }, redact: Redactor, spend: TurnSpend): ApplicationFailure {
  // The message goes into history (the failure) and the run's state: a harness's error line is bounded.
  const message = clip(redact(error.message), MAX_HARNESS_MESSAGE_CHARS);
  if (error.code === 'resume-failed') {
    return ApplicationFailure.nonRetryable(`the harness refused a fresh session: ${message}`, FailureTypes.ResumeFailed, { code: error.code, spend });
  }
  // The CLI base class words a missing executable the same way locally (ENOENT) and in a container (exit 127).
  if (error.code === 'process-exit' && /could not start: executable .* was not found/.test(error.message)) {
    return ApplicationFailure.nonRetryable(message, FailureTypes.HarnessBinaryMissing, { code: error.code, spend });
  }
  const stderr = error.stderrTail ? `\n${redact(error.stderrTail).slice(-2000)}` : '';
  return ApplicationFailure.retryable(`turn failed (${error.code}): ${message}${stderr}`, FailureTypes.TurnFailed, { code: error.code, exitCode: error.exitCode ?? null, spend });
}
