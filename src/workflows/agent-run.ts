/**
 * `agentRun`: one durable agent run. Deterministic: all I/O happens in activities.
 *
 * startSession ─► loop { runTurn → recordPromptRun → validateStep → carry out the step → guardrails } ─► endSession
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  ContinueAsNew,
  ParentClosePolicy,
  allHandlersFinished,
  condition,
  continueAsNew,
  executeChild,
  isCancellation,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import type { Usage } from '../adapters/types.js';
import { addUsage, noUsage as zero, totalTokens } from './usage.js';
import type { ActionCall, NextStep } from '../envelope/types.js';
import type { SandboxRef } from '../sandbox/types.js';
import {
  abandonSignal,
  cancelSignal,
  replySignal,
  replyUpdate,
  retryTurnSignal,
  retryTurnUpdate,
  statusQuery,
} from './messages.js';
import { formatActionResults, formatReplay, formatReply, formatSubAgentRefused, formatSubAgentResult } from './prompts.js';
import { agentAttribute, costAttribute, harnessAttribute, statusAttribute, tenantAttribute } from './search-attributes.js';
import type {
  ActionOutcome,
  AgentRunInput,
  AgentRunResult,
  AgentSpec,
  ConversationEntry,
  GuardrailName,
  RunState,
  RunStatusView,
  TurnOutcome,
} from './types.js';

type Activities = ReturnType<typeof createActivities>;

/**
 * Short steps run as local activities: on the worker that runs the workflow, recorded in history,
 * without a server round trip each. Only the long, heartbeating turn is a regular activity.
 */
const { resolveAgent, validateStep, recordPromptRun } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 5, initialInterval: '200ms' },
});

const { startSession, endSession, executeAction } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '2m',
  retry: { maximumAttempts: 5, initialInterval: '500ms' },
});

/** Reusable options for the long, heartbeating turn; attempts come from the agent's config. */
function turnActivityOptions(spec: AgentSpec) {
  return {
    startToCloseTimeout: spec.turnTimeoutMs + 60_000,
    heartbeatTimeout: '15s',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: spec.turnAttempts, initialInterval: '1s', backoffCoefficient: 2 },
  } as const;
}

const { runTurn } = proxyActivities<Activities>({ startToCloseTimeout: '1h' });

/** Why the loop was interrupted from outside, set before the loop scope is cancelled. */
type Interruption = { kind: 'cancel'; reason: string } | { kind: 'guardrail'; guardrail: GuardrailName; reason: string };

export async function agentRun(input: AgentRunInput): Promise<AgentRunResult> {
  const info = workflowInfo();
  const carried = input.carried;

  // ---- state ---------------------------------------------------------------------------------
  let spec: AgentSpec | undefined = carried?.spec;
  let sandbox: SandboxRef | undefined = carried?.sandbox;
  let state: RunState = 'starting';
  let iteration = carried?.iteration ?? 0;
  /** Turns taken by sub-agents: they share this run's iteration budget. */
  let childIterations = carried?.childIterations ?? 0;
  let usage: Usage = carried?.usage ?? zero;
  let costUsd = carried?.costUsd ?? 0;
  let costBlind = carried?.costBlind ?? false;
  let externalSessionId = carried?.externalSessionId ?? input.resumeSessionId;
  let conversation: ConversationEntry[] = [...(carried?.conversation ?? [])];
  const actionCounts: Record<string, number> = { ...(carried?.actionCounts ?? {}) };
  let malformedInARow = carried?.malformedInARow ?? 0;
  let stepSeq = carried?.stepSeq ?? 0;
  let lastStep: NextStep | undefined;
  let lastError: string | undefined;
  let pendingQuestion: string | undefined;
  let reply: string | undefined;
  let operatorDecision: { kind: 'retry' } | { kind: 'abandon'; reason: string } | undefined;
  let interruption: Interruption | undefined;
  let detail = 'starting';

  const loopScope = new CancellationScope();

  const setState = (next: RunState, what: string) => {
    state = next;
    detail = what;
    setCurrentDetails(`**${next}** · ${what}`);
    if (spec) upsertSearchAttributes([{ key: statusAttribute, value: next }]);
  };

  // ---- handlers first --------------------------------------------------------------------------
  setHandler(statusQuery, (): RunStatusView => ({
    state,
    agent: input.agent,
    harness: spec?.harness,
    iteration,
    usage,
    totalTokens: totalTokens(usage),
    costUsd,
    costBlind,
    lastStep,
    externalSessionId,
    detail,
    pendingQuestion,
    lastError,
    malformedInARow,
    actionCounts: { ...actionCounts },
  }));
  setHandler(cancelSignal, (reason?: string) => {
    if (interruption) return;
    interruption = { kind: 'cancel', reason: reason || 'cancelled by signal' };
    loopScope.cancel();
  });
  const retryTurn = () => {
    operatorDecision = { kind: 'retry' };
    return 'retrying the failed turn';
  };
  setHandler(retryTurnSignal, () => {
    if (state === 'awaiting_operator') retryTurn();
  });
  setHandler(retryTurnUpdate, retryTurn, {
    validator: () => {
      if (state !== 'awaiting_operator') throw new Error(`run is ${state}, not awaiting_operator: nothing to retry`);
    },
  });
  setHandler(abandonSignal, (reason?: string) => {
    if (state === 'awaiting_operator') operatorDecision = { kind: 'abandon', reason: reason || 'abandoned by operator' };
  });
  const acceptReply = (text: string) => {
    reply = text;
    return 'reply accepted';
  };
  setHandler(replySignal, (text: string) => {
    if (state === 'waiting_for_reply' && reply === undefined) acceptReply(text);
  });
  setHandler(replyUpdate, acceptReply, {
    validator: (text: string) => {
      if (state !== 'waiting_for_reply') throw new Error(`run is ${state}, not waiting for a reply`);
      if (typeof text !== 'string' || !text.trim()) throw new Error('reply text must be a non-empty string');
    },
  });

  // ---- helpers -----------------------------------------------------------------------------------
  const finish = (
    r: Omit<AgentRunResult, 'workflowId' | 'iterations' | 'usage' | 'costUsd' | 'externalSessionId'>,
  ): AgentRunResult => ({ workflowId: info.workflowId, iterations: iteration, usage, costUsd, externalSessionId, ...r });

  const runTurnWithOperator = async (prompt: string, resume: string | undefined): Promise<TurnOutcome> => {
    const s = spec!;
    for (;;) {
      try {
        return await runTurn.executeWithOptions(
          { ...turnActivityOptions(s), summary: `turn ${iteration} · ${s.harness}` },
          [{ workflowId: info.workflowId, runId: info.runId, turn: iteration, spec: s, sandbox: sandbox!, prompt, resumeSessionId: resume }],
        );
      } catch (err) {
        if (isCancellation(err)) throw err;
        const cause = err instanceof ActivityFailure ? err.cause : err;
        if (cause instanceof ApplicationFailure && cause.nonRetryable) throw cause;
        lastError = cause instanceof Error ? cause.message : String(cause);
        setState('awaiting_operator', `turn ${iteration} failed after ${s.turnAttempts} attempts: ${lastError}`);
        const decided = await condition(() => operatorDecision !== undefined, s.operatorTimeoutMs);
        const decision = operatorDecision;
        operatorDecision = undefined;
        if (!decided || !decision) {
          throw ApplicationFailure.nonRetryable(`no operator decision within ${s.operatorTimeoutMs} ms after: ${lastError}`, 'OperatorTimeout');
        }
        if (decision.kind === 'abandon') throw ApplicationFailure.nonRetryable(`${decision.reason} (after: ${lastError})`, 'Abandoned');
        lastError = undefined;
        setState('running', `retrying turn ${iteration} on the operator's request`);
      }
    }
  };

  const guardrailCrossed = (s: AgentSpec): { guardrail: GuardrailName; reason: string } | undefined => {
    const g = s.guardrails;
    if (totalTokens(usage) >= g.maxTokens) return { guardrail: 'tokens', reason: `token budget spent: ${totalTokens(usage)} of ${g.maxTokens}` };
    if (costUsd >= g.maxCostUsd) return { guardrail: 'cost', reason: `cost budget spent: $${costUsd.toFixed(4)} of $${g.maxCostUsd}` };
    const turns = iteration + childIterations;
    if (turns >= g.maxIterations) return { guardrail: 'iterations', reason: `iteration limit reached: ${turns} of ${g.maxIterations}` };
    return undefined;
  };

  const runActions = async (calls: readonly ActionCall[], problems: readonly (string | undefined)[]): Promise<ActionOutcome[]> => {
    const s = spec!;
    const outcomes: ActionOutcome[] = [];
    for (const [i, call] of calls.entries()) {
      const allowed = s.actions.find((a) => a.name === call.name);
      const problem = problems[i];
      if (!allowed) {
        outcomes.push({ ok: false, error: `action "${call.name}" is not allowed for this agent (allowed: ${s.actions.map((a) => a.name).join(', ') || 'none'}); it was not run` });
        continue;
      }
      if (problem) {
        outcomes.push({ ok: false, error: `invalid parameters, not run: ${problem}` });
        continue;
      }
      const used = actionCounts[call.name] ?? 0;
      if (allowed.maxExecutionsPerRun !== undefined && used >= allowed.maxExecutionsPerRun) {
        outcomes.push({ ok: false, error: `action "${call.name}" reached its cap of ${allowed.maxExecutionsPerRun} executions in this run; it was not run` });
        continue;
      }
      actionCounts[call.name] = used + 1;
      stepSeq += 1;
      detail = `action ${call.name} (turn ${iteration})`;
      outcomes.push(
        await executeAction.executeWithOptions({ startToCloseTimeout: '2m', retry: { maximumAttempts: 3 }, summary: `${call.name} · turn ${iteration}` }, [
          { workflowId: info.workflowId, agent: s.agent, sandbox: sandbox!, call, seq: stepSeq, turn: iteration },
        ]),
      );
    }
    return outcomes;
  };

  const runSubAgent = async (step: Extract<NextStep, { step: 'sub-agent' }>): Promise<AgentRunResult> => {
    const s = spec!;
    setState('running', `sub-agent ${step.agent} (turn ${iteration})`);
    const deadline = deadlineMs;
    try {
      return await executeChild(agentRun, {
        workflowId: `${info.workflowId}.sub-${iteration}`,
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        staticSummary: `sub-agent ${step.agent} of ${s.agent}`,
        typedSearchAttributes: [
          { key: agentAttribute, value: step.agent },
          { key: tenantAttribute, value: input.identity.tenantId },
        ],
        args: [
          {
            agent: step.agent,
            task: step.message,
            identity: input.identity,
            parentWorkflowId: info.workflowId,
            budget: {
              maxTokens: Math.max(1, s.guardrails.maxTokens - totalTokens(usage)),
              maxCostUsd: Math.max(0.000001, s.guardrails.maxCostUsd - costUsd),
              deadlineMs: deadline,
              maxIterations: Math.max(1, s.guardrails.maxIterations - iteration - childIterations),
            },
          },
        ],
      });
    } catch (err) {
      if (isCancellation(err)) throw err;
      const cause = err instanceof ChildWorkflowFailure ? err.cause : err;
      // The child ended without a result (terminated, timed out): nothing of its usage is known here.
      return {
        workflowId: `${info.workflowId}.sub-${iteration}`,
        status: 'failed',
        reason: `sub-agent failed: ${cause instanceof Error ? cause.message : String(cause)}`,
        failureType: 'SubAgentFailed',
        iterations: 0,
        usage: zero,
        costUsd: 0,
      };
    }
  };

  // ---- resolve the agent (frozen into history) ------------------------------------------------
  let deadlineMs = carried?.deadlineMs ?? 0;
  let result: AgentRunResult;
  let wallTimer: CancellationScope | undefined;
  try {
    if (!spec) {
      spec = await resolveAgent({ agent: input.agent, budget: input.budget });
      deadlineMs = Math.min(Date.now() + spec.guardrails.maxWallTimeMs, input.budget?.deadlineMs ?? Number.MAX_SAFE_INTEGER);
    }
    const s = spec;
    upsertSearchAttributes([
      { key: agentAttribute, value: s.agent },
      { key: harnessAttribute, value: s.harness },
      { key: tenantAttribute, value: input.identity.tenantId },
      { key: statusAttribute, value: 'running' },
    ]);

    // The wall-time guardrail: a timer that interrupts whatever the loop is doing, the in-flight turn included.
    wallTimer = new CancellationScope();
    void wallTimer
      .run(async () => {
        await sleep(Math.max(1, deadlineMs - Date.now()));
        if (interruption) return;
        interruption = { kind: 'guardrail', guardrail: 'wallTime', reason: `wall time limit of ${s.guardrails.maxWallTimeMs} ms reached` };
        loopScope.cancel();
      })
      .catch(() => undefined);

    result = await loopScope.run(async () => {
      if (!sandbox) {
        // Non-cancellable so a cancel during start can never lose the reference endSession needs.
        sandbox = await CancellationScope.nonCancellable(() =>
          startSession({
            workflowId: info.workflowId,
            runId: info.runId,
            spec: s,
            identity: input.identity,
            task: input.task,
            parentWorkflowId: input.parentWorkflowId,
          }),
        );
      }
      let prompt = carried?.nextPrompt ?? input.task;
      let turnsThisExecution = 0;
      for (;;) {
        if (turnsThisExecution > 0 && (info.continueAsNewSuggested || turnsThisExecution >= (input.continueAsNewAfterTurns ?? Infinity))) {
          await condition(allHandlersFinished);
          await continueAsNew<typeof agentRun>({
            ...input,
            carried: {
              spec: s, sandbox: sandbox!, iteration, childIterations, usage, costUsd, nextPrompt: prompt, externalSessionId,
              conversation, actionCounts, malformedInARow, deadlineMs, stepSeq, costBlind,
            },
          });
        }
        iteration += 1;
        turnsThisExecution += 1;
        setState('running', `turn ${iteration} · ${s.harness}`);

        // Resume natively where the harness can; otherwise replay the conversation (and pay for it in tokens).
        const canResume = s.capabilities.sessionResume && externalSessionId !== undefined;
        let turnInput = canResume || conversation.length === 0 ? prompt : formatReplay(conversation, prompt);
        let outcome = await runTurnWithOperator(turnInput, canResume ? externalSessionId : undefined);
        if (!outcome.ok) {
          // The harness forgot the session: start fresh with the whole conversation replayed.
          lastError = outcome.message;
          externalSessionId = undefined;
          turnInput = formatReplay(conversation, prompt);
          outcome = await runTurnWithOperator(turnInput, undefined);
          if (!outcome.ok) throw ApplicationFailure.nonRetryable(outcome.message, 'ResumeFailed');
        }
        usage = addUsage(usage, outcome.usage);
        costUsd += outcome.costUsd;
        if (!outcome.usageReported && !s.priced) costBlind = true;
        if (outcome.externalSessionId) externalSessionId = outcome.externalSessionId;
        upsertSearchAttributes([{ key: costAttribute, value: costUsd }]);

        // Accounting and validation are independent: run them side by side.
        stepSeq += 1;
        const [, validation] = await Promise.all([
          recordPromptRun({
            workflowId: info.workflowId,
            turn: iteration,
            promptId: s.promptId,
            vendor: s.vendor,
            model: s.model,
            reportedModel: outcome.model,
            usage: outcome.usage,
            costUsd: outcome.costUsd,
            costSource: outcome.costSource,
            externalSessionId: outcome.externalSessionId,
            resumed: outcome.resumed,
            durationMs: outcome.durationMs,
            input: turnInput,
            output: outcome.text,
          }),
          validateStep({ workflowId: info.workflowId, turn: iteration, seq: stepSeq, text: outcome.text, spec: s }),
        ]);
        conversation = [...conversation, { role: 'user', text: prompt }, { role: 'assistant', text: outcome.text }];

        if (!validation.ok) {
          malformedInARow += 1;
          lastError = validation.problem;
          if (malformedInARow > s.maxMalformedTurns) {
            throw ApplicationFailure.nonRetryable(
              `${malformedInARow} malformed envelopes in a row; the last: ${validation.problem}`,
              'MalformedEnvelope',
            );
          }
          prompt = validation.feedback;
        } else {
          malformedInARow = 0;
          const step = validation.step;
          lastStep = step;
          switch (step.step) {
            case 'success':
              return finish({ status: 'succeeded', result: step.result });
            case 'failed':
              return finish({ status: 'failed', reason: step.reason, failureType: 'HarnessReportedFailure' });
            case 'actions': {
              const outcomes = await runActions(step.actions, validation.actionProblems);
              prompt = formatActionResults(step.actions, outcomes);
              break;
            }
            case 'sub-agent': {
              if (!s.subAgents.includes(step.agent)) {
                prompt = formatSubAgentRefused(step.agent, s.subAgents);
                break;
              }
              const child = await runSubAgent(step);
              usage = addUsage(usage, child.usage);
              costUsd += child.costUsd;
              childIterations += child.iterations;
              if (step.terminateAfter) {
                return finish({ status: child.status, result: child.result, reason: child.reason, failureType: child.failureType, guardrail: child.guardrail });
              }
              prompt = formatSubAgentResult(step.agent, child);
              break;
            }
            case 'chat': {
              pendingQuestion = step.message;
              reply = undefined;
              setState('waiting_for_reply', `waiting for a reply to: ${step.message}`);
              if (!(await condition(() => reply !== undefined, s.chatTimeoutMs))) {
                throw ApplicationFailure.nonRetryable(`no reply within ${s.chatTimeoutMs} ms to: ${step.message}`, 'ChatTimeout');
              }
              prompt = formatReply(reply!);
              pendingQuestion = undefined;
              break;
            }
          }
        }
        const crossed = guardrailCrossed(s);
        if (crossed) return finish({ status: 'stopped', guardrail: crossed.guardrail, reason: crossed.reason });
      }
    });
  } catch (err) {
    if (err instanceof ContinueAsNew) throw err; // the session lives on in the next execution
    result = failureResult(err);
  } finally {
    wallTimer?.cancel();
  }

  // ---- compensation: on every exit path, never cancelled, idempotent ---------------------------
  const outcome = result.status;
  setState(outcome, result.reason ?? result.result?.slice(0, 120) ?? outcome);
  if (spec) {
    await CancellationScope.nonCancellable(() =>
      endSession({ workflowId: info.workflowId, spec: spec!, sandbox, status: outcome, result }),
    );
  }
  return result;

  function failureResult(err: unknown): AgentRunResult {
    if (isCancellation(err) || interruption) {
      const why = interruption ?? { kind: 'cancel' as const, reason: 'cancelled by Temporal cancel request' };
      if (why.kind === 'guardrail') return finish({ status: 'stopped', guardrail: why.guardrail, reason: why.reason });
      return finish({ status: 'cancelled', reason: why.reason });
    }
    const cause = err instanceof ActivityFailure && err.cause ? err.cause : err;
    if (cause instanceof ApplicationFailure) {
      return finish({ status: 'failed', reason: cause.message, failureType: cause.type ?? 'ApplicationFailure' });
    }
    // A bug in the loop: still end the session, and say what happened.
    const message = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
    return finish({ status: 'failed', reason: `internal error in the run loop: ${message}`, failureType: 'InternalError' });
  }
}

