/**
 * The run loop's decisions as pure functions of `RunState`: no Temporal calls, no I/O, unit-tested in
 * milliseconds. The workflow (agent-run.ts) makes the Temporal calls these decisions ask for.
 */
import { isBlobRef, previewOf } from '../contracts/text-ref.js';
import { defaultMaxSubAgentDepth, type RunPolicy } from '../spec/types.js';
import { MAX_ALLOWED_LIST_CHARS, clipText } from './bounds.js';
import { FailureTypes } from '../contracts/failures.js';
import { subAgentRefusedPrompt, subAgentResultPrompt, subAgentTooDeepPrompt, replyPrompt } from '../contracts/prompts.js';
import type { RunState } from './state.js';
import { addUsage, noUsage, totalTokens } from '../contracts/usage.js';
import { workflowVersion } from './types.js';
import type {
  AgentRunInput,
  AgentRunResult,
  GuardrailName,
  InheritedBudget,
  PlannedCall,
  RunOutcome,
  RunPhase,
  RunStatusView,
  StepView,
  TextRef,
  TurnInput,
  TurnRequest,
  TurnResult,
} from './types.js';

/** Continue-as-new once history passes this size, unless the input says otherwise (Temporal's hard limit is 50 MB). */
export const DEFAULT_CONTINUE_AS_NEW_BYTES = 4 * 1024 * 1024;
/** How much of an error or problem text the state keeps. */
const MAX_ERROR_CHARS = 2000;

/** How a run ends. */
export interface Ending {
  readonly status: RunOutcome;
  readonly result?: TextRef;
  readonly reason?: string;
  readonly failureType?: string;
  readonly guardrail?: GuardrailName;
}

/** What the workflow does after a turn (or a sub-agent, or a reply). */
export type Decision =
  /** `state.next` holds the next turn's input: check the guardrails, then take it. */
  | { readonly kind: 'next' }
  | { readonly kind: 'end'; readonly ending: Ending }
  | { readonly kind: 'sub-agent'; readonly agent: string; readonly message: TextRef; readonly terminateAfter: boolean }
  | { readonly kind: 'chat'; readonly question: TextRef };

const clip = (text: string, max = MAX_ERROR_CHARS) => clipText(text, max);

export function initialState(input: AgentRunInput): RunState {
  return {
    state: 'starting',
    detail: 'starting',
    agent: input.agent,
    deadlineMs: 0,
    iteration: 0,
    childIterations: 0,
    usage: noUsage,
    costUsd: 0,
    costBlind: false,
    externalSessionId: input.resumeSessionId,
    actionCounts: {},
    malformedInARow: 0,
    stepSeq: 0,
    attributes: {},
    continuedTimes: 0,
  };
}

export function withPhase(state: RunState, phase: RunPhase, detail: string): RunState {
  return { ...state, state: phase, detail };
}

/** The agent is resolved: keep its policy and fix the wall-time deadline (a parent's deadline wins if earlier). */
export function resolved(state: RunState, policy: RunPolicy, nowMs: number, budget?: InheritedBudget): RunState {
  const deadlineMs = Math.min(nowMs + policy.guardrails.maxWallTimeMs, budget?.deadlineMs ?? Number.MAX_SAFE_INTEGER);
  return { ...state, policy, harness: policy.harness, deadlineMs };
}

/** The sandbox is up and the task (by reference if large) is the first turn's input. */
export function sessionStarted(state: RunState, sandbox: NonNullable<RunState['sandbox']>, task: TextRef, repository?: RunState['repository']): RunState {
  return { ...state, sandbox, ...(repository ? { repository } : {}), next: state.next ?? { kind: 'prompt', parts: [task] } };
}

/** Starts the next turn: its number, its envelope's ledger seq, and how the harness session continues. */
export function beginTurn(state: RunState): { state: RunState; request: Pick<TurnRequest, 'turn' | 'input' | 'resumeSessionId' | 'replay' | 'envelopeSeq'> } {
  const policy = need(state.policy);
  const turn = state.iteration + 1;
  const envelopeSeq = state.stepSeq + 1;
  // Resume natively where the harness can; otherwise the turn replays the earlier turns from the ledger.
  const resume = policy.sessionResume && state.externalSessionId !== undefined;
  const next: RunState = { ...state, iteration: turn, stepSeq: envelopeSeq, state: 'running', detail: `turn ${turn} · ${policy.harness}` };
  return {
    state: next,
    request: {
      turn,
      envelopeSeq,
      input: state.next ?? { kind: 'prompt', parts: [] },
      ...(resume ? { resumeSessionId: state.externalSessionId } : {}),
      ...(!resume && turn > 1 ? { replay: true } : {}),
    },
  };
}

/**
 * THE action policy (nowhere else): per call, the allow-list, then the parameter problem validation found,
 * then the per-run cap. Approved calls get the next ledger seqs, in order.
 */
export function planActions(
  calls: readonly { name: string; problem?: string }[],
  policy: Pick<RunPolicy, 'actions'>,
  counts: Readonly<Record<string, number>>,
  stepSeq: number,
): { planned: PlannedCall[]; counts: Record<string, number>; stepSeq: number } {
  const used: Record<string, number> = { ...counts };
  let seq = stepSeq;
  // Repeated in every refusal of the envelope (up to its cap): clipped, the harness's system prompt lists them all.
  const allowedNames = clipText(policy.actions.map((a) => a.name).join(', ') || 'none', MAX_ALLOWED_LIST_CHARS);
  const planned = calls.map((call, index): PlannedCall => {
    const allowed = policy.actions.find((a) => a.name === call.name);
    if (!allowed) return { index, name: call.name, refused: `action "${call.name}" is not allowed for this agent (allowed: ${allowedNames}); it was not run` };
    if (call.problem) return { index, name: call.name, refused: `invalid parameters, not run: ${call.problem}` };
    const n = used[call.name] ?? 0;
    if (allowed.maxExecutionsPerRun !== undefined && n >= allowed.maxExecutionsPerRun) {
      return { index, name: call.name, refused: `action "${call.name}" reached its cap of ${allowed.maxExecutionsPerRun} executions in this run; it was not run` };
    }
    used[call.name] = n + 1;
    seq += 1;
    return { index, name: call.name, seq };
  });
  return { planned, counts: used, stepSeq: seq };
}

/** Folds a finished turn into the state and decides what comes next. */
export function applyTurn(state: RunState, result: TurnResult): { state: RunState; decision: Decision } {
  const policy = need(state.policy);
  let s: RunState = {
    ...state,
    usage: addUsage(state.usage, result.usage),
    costUsd: state.costUsd + result.costUsd,
    // The turn's own verdict (one cost authority, in runTurn) counts; a turn without usage on an unpriced harness too.
    costBlind: state.costBlind || result.costBlind === true || (!result.usageReported && !policy.priced),
    externalSessionId: result.externalSessionId ?? (result.resumeFailed ? undefined : state.externalSessionId),
    ...(result.networkRefused ? { networkRefused: (state.networkRefused ?? 0) + result.networkRefused } : {}),
    ...(result.loopbackReads ? { loopbackReads: (state.loopbackReads ?? 0) + result.loopbackReads } : {}),
    lastError: result.permissionRequestsOverCap
      ? permissionsOverCapError(state.iteration, result.permissionRequestsOverCap)
      : result.resumeFailed !== undefined
        ? clip(result.resumeFailed)
        : state.lastError,
  };
  if (!result.step.ok) {
    const malformed = s.malformedInARow + 1;
    const problem = clip(result.step.problem);
    s = { ...s, malformedInARow: malformed, lastError: problem };
    if (malformed > policy.maxMalformedTurns) {
      return { state: s, decision: { kind: 'end', ending: { status: 'failed', reason: `${malformed} malformed envelopes in a row; the last: ${problem}`, failureType: FailureTypes.MalformedEnvelope } } };
    }
    return { state: { ...s, next: { kind: 'feedback', problem: result.step.problem } }, decision: { kind: 'next' } };
  }
  const view = result.step.view;
  // The state keeps an actions step's call names; why a call was refused is in the next input once (up to the cap).
  s = { ...s, malformedInARow: 0, lastStep: view.step === 'actions' ? { ...view, calls: view.calls.map(({ name }) => ({ name })) } : view };
  switch (view.step) {
    case 'success':
      return { state: s, decision: { kind: 'end', ending: { status: 'succeeded', result: view.result } } };
    case 'failed':
      return { state: s, decision: { kind: 'end', ending: { status: 'failed', reason: previewOf(view.reason, MAX_ERROR_CHARS), failureType: FailureTypes.HarnessReportedFailure } } };
    case 'actions': {
      const plan = planActions(view.calls, policy, s.actionCounts, s.stepSeq);
      const next: TurnInput = { kind: 'actions', envelopeSeq: s.stepSeq, calls: plan.planned };
      return { state: { ...s, actionCounts: plan.counts, stepSeq: plan.stepSeq, next }, decision: { kind: 'next' } };
    }
    case 'sub-agent':
      if (!policy.subAgents.includes(view.agent)) {
        return { state: { ...s, next: { kind: 'prompt', parts: subAgentRefusedPrompt(view.agent, policy.subAgents) } }, decision: { kind: 'next' } };
      }
      return { state: s, decision: { kind: 'sub-agent', agent: view.agent, message: view.message, terminateAfter: view.terminateAfter } };
    case 'chat':
      return {
        state: { ...s, pendingQuestion: previewOf(view.message, 1000), state: 'waiting_for_reply', detail: `waiting for a reply to: ${previewOf(view.message, 200)}` },
        decision: { kind: 'chat', question: view.message },
      };
  }
}

/** The run's `lastError` after a turn whose harness asked more permission requests than its agent allows. */
export function permissionsOverCapError(turn: number, over: { readonly cap: number; readonly denied: number }): string {
  return (
    `turn ${turn}: the harness asked more than ${over.cap} permission requests, this agent's cap per turn (permissions.maxRequestsPerTurn); ` +
    `the ${over.denied} after the first ${over.cap} were denied without asking anyone`
  );
}

/** What a sub-agent may spend: what this run has left, and how deep its own sub-agents may still nest. */
export function childBudget(state: RunState): InheritedBudget {
  const g = need(state.policy).guardrails;
  return {
    maxTokens: Math.max(1, g.maxTokens - totalTokens(state.usage)),
    maxCostUsd: Math.max(0.000001, g.maxCostUsd - state.costUsd),
    deadlineMs: state.deadlineMs,
    maxIterations: Math.max(1, g.maxIterations - state.iteration - state.childIterations),
    maxSubAgentDepth: Math.max(0, subAgentLevelsLeft(state) - 1),
  };
}

/** How many levels of sub-agents may still nest below this run. */
function subAgentLevelsLeft(state: RunState): number {
  return need(state.policy).guardrails.maxSubAgentDepth ?? defaultMaxSubAgentDepth;
}

/**
 * A sub-agent step of a run at the deepest level its tree allows: nothing starts, the harness is told why (and the
 * operator, in `lastError`). Undefined when the sub-agent may start.
 */
export function subAgentTooDeep(state: RunState, agent: string): { state: RunState; decision: Decision } | undefined {
  if (subAgentLevelsLeft(state) >= 1) return undefined;
  const lastError = `sub-agent "${agent}" refused: the run tree's sub-agent depth limit (guardrails.maxSubAgentDepth) is reached`;
  return { state: { ...state, lastError, next: { kind: 'prompt', parts: subAgentTooDeepPrompt(agent) } }, decision: { kind: 'next' } };
}

/**
 * Folds a sub-agent's result into this run: its usage counts here, and its turns and its own sub-agents' do, so the
 * iteration budget holds for the whole tree, not for each run; it ends the run or becomes the next input.
 */
export function afterSubAgent(state: RunState, agent: string, child: AgentRunResult, terminateAfter: boolean): { state: RunState; decision: Decision } {
  const s: RunState = {
    ...state,
    usage: addUsage(state.usage, child.usage),
    costUsd: state.costUsd + child.costUsd,
    costBlind: state.costBlind || child.costBlind === true,
    childIterations: state.childIterations + child.iterations + (child.subAgentIterations ?? 0),
  };
  if (terminateAfter) {
    const { status, reason, failureType, guardrail } = child;
    return { state: s, decision: { kind: 'end', ending: { status, result: child.resultRef ?? child.result, reason, failureType, guardrail } } };
  }
  return { state: { ...s, next: { kind: 'prompt', parts: subAgentResultPrompt(agent, child) } }, decision: { kind: 'next' } };
}

/** A sub-agent that ended without a result (terminated, timed out): nothing of its usage is known here, so it is blind. */
export function lostSubAgent(workflowId: string, message: string): AgentRunResult {
  return { workflowId, status: 'failed', reason: `sub-agent failed: ${message}`, failureType: FailureTypes.SubAgentFailed, iterations: 0, usage: noUsage, costUsd: 0, costBlind: true };
}

/** The user's reply (by reference if large) is the next turn's input. */
export function afterReply(state: RunState, reply: TextRef): RunState {
  return { ...state, pendingQuestion: undefined, next: { kind: 'prompt', parts: replyPrompt(reply) } };
}

/** The first guardrail this state crosses, if any (checked after every turn, before its actions run). */
export function guardrailCrossed(state: RunState): { guardrail: GuardrailName; reason: string } | undefined {
  const g = need(state.policy).guardrails;
  const tokens = totalTokens(state.usage);
  if (tokens >= g.maxTokens) return { guardrail: 'tokens', reason: `token budget spent: ${tokens} of ${g.maxTokens}` };
  if (state.costUsd >= g.maxCostUsd) return { guardrail: 'cost', reason: `cost budget spent: $${state.costUsd.toFixed(4)} of $${g.maxCostUsd}` };
  const turns = state.iteration + state.childIterations;
  if (turns >= g.maxIterations) return { guardrail: 'iterations', reason: `iteration limit reached: ${turns} of ${g.maxIterations}` };
  return undefined;
}

/** Whether to continue as new before the next turn: on Temporal's suggestion, by history size, or by turn count. */
export function shouldContinueAsNew(
  input: Pick<AgentRunInput, 'continueAsNewAfterTurns' | 'continueAsNewAtHistoryBytes'>,
  now: { turnsThisExecution: number; suggested: boolean; historyBytes: number },
): boolean {
  if (now.turnsThisExecution === 0) return false;
  return (
    now.suggested ||
    now.historyBytes >= (input.continueAsNewAtHistoryBytes ?? DEFAULT_CONTINUE_AS_NEW_BYTES) ||
    now.turnsThisExecution >= (input.continueAsNewAfterTurns ?? Infinity)
  );
}

/** The next execution's input: the same run, its state, and a cursor — never the conversation, nor the task again. */
export function continuedInput(input: AgentRunInput, state: RunState): AgentRunInput {
  return {
    agent: input.agent,
    task: previewOf(input.task),
    identity: input.identity,
    ...(input.parentWorkflowId !== undefined ? { parentWorkflowId: input.parentWorkflowId } : {}),
    ...(input.budget !== undefined ? { budget: input.budget } : {}),
    ...(input.continueAsNewAfterTurns !== undefined ? { continueAsNewAfterTurns: input.continueAsNewAfterTurns } : {}),
    ...(input.continueAsNewAtHistoryBytes !== undefined ? { continueAsNewAtHistoryBytes: input.continueAsNewAtHistoryBytes } : {}),
    // Named from here on even when the start left it out: the chain keeps the sequence it started with.
    workflowVersion: input.workflowVersion ?? workflowVersion,
    carried: { ...state, continuedTimes: state.continuedTimes + 1 },
  };
}

/** The run's result: a large success result stays in the blob store, the result carries its opening. */
export function runResult(state: RunState, workflowId: string, ending: Ending): AgentRunResult {
  const { result, status, ...rest } = ending;
  return {
    workflowId,
    status,
    iterations: state.iteration,
    ...(state.childIterations > 0 ? { subAgentIterations: state.childIterations } : {}),
    usage: state.usage,
    costUsd: state.costUsd,
    ...(state.costBlind ? { costBlind: true as const } : {}),
    ...(state.externalSessionId !== undefined ? { externalSessionId: state.externalSessionId } : {}),
    ...dropUndefined(rest),
    ...(result === undefined ? {} : isBlobRef(result) ? { result: result.preview, resultRef: result } : { result }),
  };
}

/** The status query's answer. */
export function statusView(state: RunState): RunStatusView {
  return { ...state, totalTokens: totalTokens(state.usage) };
}

/** A step's short description for details and logs. */
export function describeStep(view: StepView): string {
  switch (view.step) {
    case 'actions':
      return `actions ${view.calls.map((c) => c.name).join(', ')}`;
    case 'sub-agent':
      return `sub-agent ${view.agent}`;
    default:
      return view.step;
  }
}

function dropUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function need<T>(value: T | undefined): T {
  if (value === undefined) throw new TypeError('the run has no resolved agent yet');
  return value;
}
