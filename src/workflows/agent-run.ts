/**
 * `agentRun`: one durable agent run. Deterministic: all I/O happens in activities, every decision is a pure
 * function of `RunState` (decide.ts); this file makes the Temporal calls those decisions ask for.
 *
 * openRun (agent resolved, session started) ─► loop { runTurn (actions → harness → accounting → validation) → decide
 *                                        → sub-agent | wait for reply → guardrails } ─► endSession
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  ContinueAsNew,
  ParentClosePolicy,
  TimeoutFailure,
  allHandlersFinished,
  condition,
  continueAsNew,
  executeChild,
  isCancellation,
  proxyActivities,
  proxyLocalActivities,
  proxySinks,
  setCurrentDetails,
  setDefaultSignalHandler,
  setHandler,
  sleep,
  upsertMemo,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { SearchAttributeUpdatePair } from '@temporalio/common';
import type { createActivities } from '../activities/index.js';
import { isBlobRef, previewOf } from '../contracts/text-ref.js';
import { afterReprovision, endSessionWhereItLives, hostLossOf, hostLossReason, placement, reprovisionedRequest, shouldReprovision } from './affinity.js';
import type { RunPolicy } from '../spec/types.js';
import {
  afterReply,
  afterSubAgent,
  applyTurn,
  beginTurn,
  childBudget,
  continuedInput,
  guardrailCrossed,
  initialState,
  lostSubAgent,
  resolved,
  runResult,
  sessionStarted,
  shouldContinueAsNew,
  statusView,
  subAgentTooDeep,
  withPhase,
  type Decision,
} from './decide.js';
import {
  abandonSignal,
  abandonUpdate,
  cancelSignal,
  cancelUpdate,
  operatorInputLimits,
  replyProblem,
  replySignal,
  replyUpdate,
  retryTurnSignal,
  retryTurnUpdate,
  statusQuery,
  turnProgressSignal,
  updatePayloadProblem,
} from './messages.js';
import { FailureTypes } from '../contracts/failures.js';
import { subAgentWorkflowId } from './ids.js';
import { roundUsd } from '../contracts/money.js';
import { CANCEL_REQUEST_GRACE_MS, OUTCOME_MEMO_KEY, failureMessage, resultFromFailure, runCancelled, runFailure } from './outcomes.js';
import { agentAttribute, costAttribute, harnessAttribute, statusAttribute, tenantAttribute } from './search-attributes.js';
import { installApprovalHandlers } from './approval-handlers.js';
import type { OperatorAction } from '../operators/index.js';
import { decisionModeOf, decisionRequest, takeDecision } from './operator-decisions.js';
import { detailsText, turnStartToCloseMs } from './approvals.js';
import { progressNoteOf, type TurnProgressNote } from './progress.js';
import type { RunState } from './state.js';
import type { DurableHarnessSinks } from './sinks.js';
import { budgetEnding, foldFailedSpend, turnBudget, untilDoneDelayMs } from './turn-spend.js';
import { assertKnownVersion } from './versions.js';
import { deliverRun, delivers } from './deliver.js';
import { deliverableLine } from '../contracts/repository.js';
import { compactSandbox, workflowVersion, type AgentRunInput, type OpenRunFailure, type AgentRunResult, type GuardrailName, type RunPhase, type SessionEndTrouble, type TextRef, type TurnRequest, type TurnResult } from './types.js';

type Activities = ReturnType<typeof createActivities>;

/**
 * Short steps run as local activities: on the worker that runs the workflow, without a server round trip each,
 * and their inputs stay out of history. Only the long, heartbeating turn is a regular activity.
 */
const { openRun, endSession, storeText, reprovisionSession, turnSpent } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '2m',
  retry: { maximumAttempts: 5, initialInterval: '500ms' },
});

/**
 * The end of session retried until it succeeds (`untilDone`): the same local activity, but every retry's pause is a
 * workflow timer, so the workflow task is not held between attempts and `status` answers (with `sessionEnd`) while
 * the end keeps failing. Backoff inside the SDK held it for 7.5 s per round of 5, and the status query timed out.
 */
const { endSession: endSessionPatiently } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '2m',
  retry: { maximumAttempts: 5, initialInterval: '500ms' },
  localRetryThreshold: '0s',
});

const { runTurn } = proxyActivities<Activities>({ startToCloseTimeout: '1h' });

/** Kills the in-flight turn at once where it runs on this worker; Temporal's cancellation follows on its heartbeat. */
const { turnStops } = proxySinks<DurableHarnessSinks>();

/** Options for the long, heartbeating turn; attempts come from the agent's config. */
function turnActivityOptions(policy: RunPolicy, turn: number) {
  return {
    startToCloseTimeout: turnStartToCloseMs(policy),
    heartbeatTimeout: '15s',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: policy.turnAttempts, initialInterval: '1s', backoffCoefficient: 2 },
    summary: `turn ${turn} · ${policy.harness}`,
  } as const;
}

/** Why the loop was interrupted from outside, set before the loop scope is cancelled. */
type Interruption = { kind: 'cancel'; reason: string } | { kind: 'guardrail'; guardrail: GuardrailName; reason: string };

export async function agentRun(input: AgentRunInput): Promise<AgentRunResult> {
  const { workflowId, runId } = workflowInfo();
  assertKnownVersion(input.workflowVersion);
  let state: RunState = input.carried ?? initialState(input);
  /** Messages from outside, waiting to be taken; never carried across continue-as-new (handlers finish first). */
  const inbox: { reply?: TextRef; operator?: { kind: 'retry' } | { kind: 'abandon'; reason: string }; interruption?: Interruption } = {};
  const loopScope = new CancellationScope();
  /**
   * The turn being run, with the run's spend before it: an interruption mid-turn takes the turn's spend from the ledger.
   * `lost`: some of its attempts went with their host or failed to an operator, so its spend comes from the ledger.
   */
  let turnInFlight: { turn: number; before: Pick<RunState, 'usage' | 'costUsd' | 'costBlind'>; lost?: boolean } | undefined;
  /** The turn in flight's last progress note (display only) and when it came; cleared when the turn returns or fails. */
  let progress: { note: TurnProgressNote; at: number } | undefined;

  const update = (next: RunState) => {
    state = next;
    setCurrentDetails(detailsText(state, progress));
  };
  const setPhase = (phase: RunPhase, detail: string) => {
    update(withPhase(state, phase, detail));
    syncAttributes();
  };
  /**
   * Upserts the search attributes whose values changed since they were last written: no event otherwise. Between
   * phase changes the cost is written when it moves by a cent (a turn rarely costs less, so most turns write it
   * anyway); with a phase change — the last one included — it is written exactly.
   */
  const syncAttributes = (...changes: SearchAttributeUpdatePair[]) => {
    if (!state.policy) return;
    const written = state.attributes;
    const phaseChanged = written.status !== state.state;
    if (phaseChanged) changes.push({ key: statusAttribute, value: state.state });
    const cents = (usd: number) => Math.floor(usd * 100);
    const costMoved = phaseChanged ? (written.costUsd ?? 0) !== state.costUsd : cents(written.costUsd ?? 0) !== cents(state.costUsd);
    if (costMoved) changes.push({ key: costAttribute, value: roundUsd(state.costUsd) });
    if (changes.length === 0) return;
    upsertSearchAttributes(changes);
    state = { ...state, attributes: { ...written, status: state.state, costUsd: costMoved ? state.costUsd : written.costUsd } };
  };

  // ---- handlers first --------------------------------------------------------------------------
  /** Set while the end of the session keeps failing: the status query shows it (a query answer, no command). */
  let sessionEnd: SessionEndTrouble | undefined;
  setHandler(statusQuery, () => ({ ...statusView(state), ...(sessionEnd ? { sessionEnd } : {}) }), {
    description: "The run's state, counters, usage and cost, last step, pending permission requests and lastError; sessionEnd while ending the session keeps failing.",
  });
  /** Every operator decision is authorized first (operator-decisions.ts); unsigned signals count only in a trusted network. */
  const decisionHost = { state: () => state, update };
  const trusted = () => decisionModeOf(state) === 'trusted-network';
  const reasonRefusal = (reason: unknown): string | undefined =>
    typeof reason === 'string' && reason.length > operatorInputLimits.maxInlineBytes ? `the reason is ${reason.length} characters, over the limit of ${operatorInputLimits.maxInlineBytes}` : undefined;
  /** The decision an update's argument carries, once authorized (a refusal fails the update). */
  const decide = (action: OperatorAction, arg: unknown) => takeDecision(decisionHost, action, decisionRequest(action, [arg]));
  /** A validator's check of the reason an update carries. */
  const checkReason = (action: 'cancel' | 'abandon', arg: unknown) => {
    const refusal = updatePayloadProblem(action, arg) ?? reasonRefusal(decisionRequest(action, [arg]).reason);
    if (refusal) throw new Error(refusal);
  };
  /**
   * A turn in flight is stopped at once where it runs on this worker (a sink: no command). Not on replay: the turn
   * was stopped when the run first decided, and a replay worker has no sink to call.
   */
  const stopTurnHere = (reason: string) => {
    if (turnInFlight && !workflowInfo().unsafe.isReplaying) turnStops.requested(reason);
  };
  /** Interrupts the loop, the turn in flight first. */
  const interrupt = (why: Interruption) => {
    inbox.interruption = why;
    stopTurnHere(why.reason);
    loopScope.cancel();
  };
  const cancel = (reason?: string) => {
    if (inbox.interruption) return 'the run is already stopping';
    interrupt({ kind: 'cancel', reason: reason || 'cancelled by signal' });
    return 'cancelling: the in-flight turn is killed and the session ended';
  };
  // Temporal's own cancel request (the UI's, `temporal workflow cancel`) reaches the turn the same way.
  CancellationScope.current().cancelRequested.catch(() => {
    if (!inbox.interruption) stopTurnHere('cancelled by Temporal cancel request');
  });
  setHandler(
    cancelSignal,
    (reason?: string) => {
      if (trusted()) cancel(reason);
    },
    { description: 'Cancel the run (reason). Unsigned: only where decisions are not authenticated (trusted-network); else use the cancelRun update.' },
  );
  setHandler(
    cancelUpdate,
    async (arg) => {
      const taken = await decide('cancel', arg);
      return cancel(`${taken.reason || 'cancelled'}${taken ? ` (by ${taken.principal})` : ''}`);
    },
    {
      description: 'Cancel the run: {"reason": "…"?} — signed by `durable-harness cancel RUN` where decisions must be signed.',
      validator: (arg) => {
        if (inbox.interruption) throw new Error('the run is already stopping');
        checkReason('cancel', arg);
      },
    },
  );
  const retryTurn = () => {
    inbox.operator = { kind: 'retry' };
    return 'retrying the failed turn';
  };
  setHandler(
    retryTurnSignal,
    () => {
      if (trusted() && state.state === 'awaiting_operator') retryTurn();
    },
    { description: 'Run the failed turn again (awaiting_operator). Unsigned: trusted-network only; else the retryTurn update.' },
  );
  const awaitingOperator = (what: string) => {
    if (state.state !== 'awaiting_operator') {
      const hint = what === 'abandon' && (state.state === 'running' || state.state === 'waiting_for_reply') ? ' (to stop it, cancel it)' : '';
      throw new Error(`run is ${state.state}, not awaiting_operator: nothing to ${what}${hint}`);
    }
  };
  /** After an authorization round the run may have moved on: the same check as the validator, as a failure. */
  const stillAwaiting = (what: string) => {
    try {
      awaitingOperator(what);
    } catch (err) {
      throw ApplicationFailure.create({ type: 'RunStateChanged', message: (err as Error).message, nonRetryable: true });
    }
  };
  setHandler(
    retryTurnUpdate,
    async (arg) => {
      await decide('retry', arg);
      stillAwaiting('retry');
      return retryTurn();
    },
    {
      description: 'Run the failed turn again; rejected unless the run awaits an operator. {} — signed by `durable-harness retry RUN` where decisions must be signed.',
      validator: (request) => {
        const problem = updatePayloadProblem('retry', request);
        if (problem) throw new Error(problem);
        awaitingOperator('retry');
      },
    },
  );
  const abandon = (reason?: string) => {
    inbox.operator = { kind: 'abandon', reason: reason || 'abandoned by operator' };
    return 'abandoned: the run ends as failed';
  };
  setHandler(
    abandonSignal,
    (reason?: string) => {
      if (trusted() && state.state === 'awaiting_operator') abandon(reason);
    },
    { description: 'End an awaiting_operator run as failed (reason). Unsigned: trusted-network only; else the abandon update.' },
  );
  setHandler(
    abandonUpdate,
    async (arg) => {
      const taken = await decide('abandon', arg);
      stillAwaiting('abandon');
      return abandon(taken.reason);
    },
    {
      description: 'End an awaiting_operator run as failed: {"reason": "…"?} — signed by `durable-harness abandon RUN` where decisions must be signed.',
      validator: (arg) => {
        awaitingOperator('abandon');
        checkReason('abandon', arg);
      },
    },
  );
  const acceptReply = (reply: TextRef) => {
    inbox.reply = reply;
    return 'reply accepted';
  };
  /** The last line: a rejected update leaves nothing in history, an accepted one keeps its argument there. */
  const replyRefusal = (reply: unknown): string | undefined => {
    if (state.state !== 'waiting_for_reply') return `run is ${state.state}, not waiting for a reply`;
    if (inbox.reply !== undefined) return 'the run already has its reply';
    return replyProblem(reply);
  };
  setHandler(
    replySignal,
    (text: string) => {
      if (trusted() && replyRefusal(text) === undefined) acceptReply(text);
    },
    { description: 'Answer the run\'s question (text). Unsigned: trusted-network only; else the reply update.' },
  );
  setHandler(
    replyUpdate,
    async (arg) => {
      const taken = await decide('reply', arg);
      const refusal = replyRefusal(taken.text);
      if (refusal) throw ApplicationFailure.create({ type: 'RunStateChanged', message: refusal, nonRetryable: true });
      return acceptReply(taken.text!);
    },
    {
      description: 'Answer the run\'s question: {"text": "…"} — signed by `durable-harness reply RUN TEXT` where decisions must be signed.',
      validator: (arg) => {
        const refusal = updatePayloadProblem('reply', arg) ?? replyRefusal(decisionRequest('reply', [arg]).text);
        if (refusal) throw new Error(refusal);
      },
    },
  );

  const approvals = installApprovalHandlers({ workflowId, state: () => state, update });
  // The turn activity's notifications have no handler of their own, so the UI does not offer them as controls.
  setDefaultSignalHandler((name, ...args) => {
    if (name !== turnProgressSignal.name) return approvals.notified(name);
    const note = progressNoteOf(args[0], turnInFlight?.turn, progress?.note);
    if (!note) return;
    progress = { note, at: Date.now() };
    setCurrentDetails(detailsText(state, progress));
  });

  // ---- the Temporal calls the decisions ask for --------------------------------------------------
  /** Whether the run's spend now crosses a guardrail: the interruption is set, the run stops instead of retrying. */
  const guardrailStops = (): boolean => {
    const crossed = guardrailCrossed(state);
    if (crossed) inbox.interruption = { kind: 'guardrail', guardrail: crossed.guardrail, reason: crossed.reason };
    return crossed !== undefined;
  };

  /**
   * The turn in flight's spend by the ledger's books — every attempt of every scheduling, those lost with their host
   * or worker included (a timed-out last attempt carries no spend) — in place of whatever part of it was folded before.
   */
  const spendFromLedger = async (): Promise<void> => {
    const inFlight = turnInFlight!;
    inFlight.lost = true;
    const spent = await CancellationScope.nonCancellable(() => turnSpent({ workflowId, runId, turn: inFlight.turn })).catch(() => undefined);
    if (spent) update(foldFailedSpend({ ...state, ...inFlight.before }, spent));
  };

  /** Runs a turn; when it fails after its retries, waits for an operator to retry it or give up. */
  const runTurnWithOperator = async (policy: RunPolicy, request: TurnRequest): Promise<TurnResult> => {
    /** Attempts of this turn that ended in heartbeat timeouts, and since when (workflow time): see `neverRan`. */
    const frozen = { attempts: 0, since: undefined as number | undefined };
    /**
     * Whether the turn's attempts were lost without running: a frozen (SIGSTOPped, swapped-out) worker's open polls
     * take attempts and sit on them until the heartbeat timeout, 15 s each, so a one-minute freeze used up the
     * default 3 (issue 18). When the ledger shows fewer attempts of the turn began than timed out, the turn is
     * scheduled again without asking an operator — for at most the host-loss timeout, after which it counts as failed.
     */
    const neverRan = async (err: unknown): Promise<boolean> => {
      const cause = err instanceof ActivityFailure ? err.cause : err;
      if (!(cause instanceof TimeoutFailure && cause.timeoutType === 'HEARTBEAT')) return false;
      frozen.attempts += policy.turnAttempts;
      frozen.since ??= Date.now();
      if (Date.now() - frozen.since > hostLossOf(policy).timeoutMs) return false;
      const spent = await CancellationScope.nonCancellable(() => turnSpent({ workflowId, runId, turn: request.turn })).catch(() => undefined);
      const begun = spent?.attempts;
      if (begun === undefined || begun >= frozen.attempts) return false;
      setPhase('running', `turn ${request.turn}: ${frozen.attempts - begun} of its attempts were taken by a worker that never ran them (frozen?); trying again`);
      return true;
    };
    for (;;) {
      try {
        const where = placement(policy, request.sandbox);
        const result = await runTurn.executeWithOptions({ ...turnActivityOptions(policy, request.turn), ...where }, [request]);
        progress = undefined;
        approvals.turnEnded(request.turn);
        return result;
      } catch (err) {
        progress = undefined;
        if (isCancellation(err)) throw err;
        if (await neverRan(err)) {
          // Whatever the attempt that did run left behind dies before the next one starts.
          request = { ...request, cleanFirst: true };
          continue;
        }
        const hostLost = hostLossReason(err, request.sandbox, policy);
        if (hostLost && shouldReprovision(state, policy)) {
          // The host holding the workspace is gone, and the attempts it ran with it: what they spent is in the ledger
          // only, and counts toward the guardrails before the turn runs again.
          await spendFromLedger();
          if (guardrailStops()) throw err;
          // A fresh workspace on this worker, the conversation replayed.
          const lost = state.sandbox!;
          const sandbox = await CancellationScope.nonCancellable(() =>
            reprovisionSession({ workflowId, runId, specHash: policy.specHash, identity: input.identity, lost, turn: request.turn, reason: hostLost, ...(state.repository ? { repository: state.repository } : {}) }),
          );
          update(afterReprovision(state, sandbox));
          setPhase('running', `turn ${request.turn} moved to ${sandbox.hostQueue ?? 'a fresh workspace'}: ${hostLost}`);
          request = reprovisionedRequest(request, compactSandbox(sandbox));
          continue;
        }
        const cause = err instanceof ActivityFailure ? err.cause : err;
        // What the failed attempts spent counts: toward the run's totals and its guardrails — from the ledger, which
        // has the attempts lost with their host or worker too.
        await spendFromLedger();
        if (guardrailStops()) throw cause;
        if (cause instanceof ApplicationFailure && cause.nonRetryable) throw cause;
        const lastError = hostLost ?? (cause instanceof Error ? cause.message : String(cause));
        update({ ...state, lastError });
        setPhase('awaiting_operator', `turn ${request.turn} failed after ${policy.turnAttempts} attempts: ${lastError}`);
        const decided = await condition(() => inbox.operator !== undefined, policy.operatorTimeoutMs, { summary: 'operator decision timeout' });
        const decision = inbox.operator;
        inbox.operator = undefined;
        if (!decided || !decision) {
          throw ApplicationFailure.nonRetryable(`no operator decision within ${policy.operatorTimeoutMs} ms after: ${lastError}`, FailureTypes.OperatorTimeout);
        }
        if (decision.kind === 'abandon') throw ApplicationFailure.nonRetryable(`${decision.reason} (after: ${lastError})`, FailureTypes.Abandoned);
        update({ ...state, lastError: undefined });
        setPhase('running', `retrying turn ${request.turn} on the operator's request`);
        // What the failed attempts left (a harness of an attempt that lost its heartbeat, still running) dies before the
        // retry starts: the retry is attempt 1 of a new scheduling, which otherwise kills nothing first. Activity
        // input only: the command sequence is unchanged.
        request = { ...request, cleanFirst: true };
      }
    }
  };

  /** Runs a sub-agent: its id stays within the id limit, and its budget carries what the tree has left, depth included. */
  const runSubAgent = async (agent: string, message: TextRef): Promise<AgentRunResult> => {
    setPhase('running', `sub-agent ${agent} (turn ${state.iteration})`);
    const childId = subAgentWorkflowId(workflowId, state.iteration);
    try {
      return await executeChild(agentRun, {
        workflowId: childId,
        parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
        staticSummary: `sub-agent ${agent} of ${state.agent}`,
        typedSearchAttributes: [
          { key: agentAttribute, value: agent },
          { key: tenantAttribute, value: input.identity.tenantId },
        ],
        args: [{ agent, task: message, identity: input.identity, parentWorkflowId: workflowId, parentSandbox: state.sandbox, budget: childBudget(state), workflowVersion }],
      });
    } catch (err) {
      // This run's cancellation reaches the child too; a child cancelled on its own is just a lost sub-agent.
      if (isCancellation(err) && CancellationScope.current().consideredCancelled) throw err;
      const cause = err instanceof ChildWorkflowFailure ? err.cause : err;
      // A child that failed, stopped or was cancelled carries its typed result in the failure.
      return resultFromFailure(err) ?? lostSubAgent(childId, cause instanceof Error ? cause.message : String(cause));
    }
  };

  /** Waits durably for the user's answer; a long one is stored and travels on by reference. */
  const waitForReply = async (policy: RunPolicy, question: TextRef): Promise<void> => {
    inbox.reply = undefined;
    syncAttributes();
    if (!(await condition(() => inbox.reply !== undefined, policy.chatTimeoutMs, { summary: 'reply timeout' }))) {
      throw ApplicationFailure.nonRetryable(`no reply within ${policy.chatTimeoutMs} ms to: ${previewOf(question)}`, FailureTypes.ChatTimeout);
    }
    const reply = inbox.reply!;
    inbox.reply = undefined;
    const ref = !isBlobRef(reply) && reply.length > policy.inlineTextLimit ? await storeText({ text: reply }) : reply;
    update(afterReply(state, ref));
    setPhase('running', `reply received (turn ${state.iteration})`);
  };

  const loop = async (policy: RunPolicy): Promise<AgentRunResult> => {
    for (let turns = 0; ; turns++) {
      // workflowInfo() is a snapshot: read it fresh to see the server's suggestion and the history size now.
      const info = workflowInfo();
      if (shouldContinueAsNew(input, { turnsThisExecution: turns, suggested: info.continueAsNewSuggested, historyBytes: info.historySize })) {
        await condition(allHandlersFinished);
        await continueAsNew<typeof agentRun>(continuedInput(input, state));
      }
      const begun = beginTurn(state);
      update(begun.state);
      syncAttributes();
      // The run's remaining budget goes with the turn: the harness is stopped mid-turn when it is spent.
      turnInFlight = { turn: begun.request.turn, before: { usage: state.usage, costUsd: state.costUsd, costBlind: state.costBlind } };
      let result = await runTurnWithOperator(policy, { ...begun.request, specHash: policy.specHash, sandbox: compactSandbox(state.sandbox!), budget: turnBudget(state) });
      if (turnInFlight.lost) {
        // Attempts of this turn were lost on the way: its whole spend is the ledger's (read now that the last
        // attempt's rows are in), in place of the result's, which has only its own scheduling's attempts.
        const { turn, before } = turnInFlight;
        const spent = await CancellationScope.nonCancellable(() => turnSpent({ workflowId, runId, turn })).catch(() => undefined);
        if (spent) {
          update({ ...state, ...before });
          result = { ...result, usage: spent.usage, costUsd: spent.costUsd, ...(spent.costBlind ? { costBlind: true as const } : {}) };
        }
      }
      turnInFlight = undefined;
      let { state: next, decision }: { state: RunState; decision: Decision } = applyTurn(state, result);
      update(next);
      syncAttributes();
      const spent = budgetEnding(result);
      if (spent) return runResult(state, workflowId, spent);
      for (;;) {
        if (decision.kind === 'end') return runResult(state, workflowId, decision.ending);
        const crossed = guardrailCrossed(state);
        if (crossed) return runResult(state, workflowId, { status: 'stopped', guardrail: crossed.guardrail, reason: crossed.reason });
        if (decision.kind === 'next') break;
        if (decision.kind === 'chat') {
          await waitForReply(policy, decision.question);
          break;
        }
        // The run tree's limits: a depth limit, tree-wide iterations, bounded ids.
        const tooDeep = subAgentTooDeep(state, decision.agent);
        if (tooDeep) {
          ({ state: next, decision } = tooDeep);
          update(next);
          continue;
        }
        const child = await runSubAgent(decision.agent, decision.message);
        ({ state: next, decision } = afterSubAgent(state, decision.agent, child, decision.terminateAfter));
        update(next);
        syncAttributes();
      }
    }
  };

  /** The agent resolved: the run keeps its policy (its wall-time deadline from now) and names its harness. */
  const adoptPolicy = (policy: RunPolicy, starting: boolean) => {
    update(resolved(state, policy, Date.now(), input.budget));
    if (starting) update(withPhase(state, 'running', 'starting the session'));
    syncAttributes({ key: harnessAttribute, value: policy.harness });
  };

  // ---- run ---------------------------------------------------------------------------------------
  let result: AgentRunResult;
  let wallTimer: CancellationScope | undefined;
  try {
    if (!state.policy) {
      // The agent resolved and the session started in one round. Non-cancellable so a cancel during the start can
      // never lose the reference endSession needs.
      const opened = await CancellationScope.nonCancellable(() =>
        openRun({
          agent: input.agent,
          budget: input.budget,
          workflowId,
          runId,
          identity: input.identity,
          task: input.task,
          parentWorkflowId: input.parentWorkflowId,
          parentSandbox: input.parentSandbox,
          ...(input.repository ? { repository: input.repository } : {}),
        }),
      ).catch((err: unknown) => {
        // The agent resolved but its session did not start: the run ends its record like any run that had a policy.
        const policy = openRunPolicy(err);
        if (policy) adoptPolicy(policy, false);
        throw err;
      });
      adoptPolicy(opened.policy, true);
      update(sessionStarted(state, opened.sandbox, opened.task, opened.repository));
    }
    const policy = state.policy!;

    // The wall-time guardrail: a timer that interrupts whatever the loop is doing, the in-flight turn included.
    wallTimer = new CancellationScope();
    void wallTimer
      .run(async () => {
        await sleep(Math.max(1, state.deadlineMs - Date.now()), { summary: 'wall-time guardrail' });
        if (inbox.interruption) return;
        interrupt({ kind: 'guardrail', guardrail: 'wallTime', reason: `wall time limit of ${policy.guardrails.maxWallTimeMs} ms reached` });
      })
      .catch(() => undefined);

    result = await loopScope.run(() => loop(policy));
  } catch (err) {
    if (err instanceof ContinueAsNew) throw err; // the session lives on in the next execution
    result = failureResult(err);
  } finally {
    wallTimer?.cancel();
  }

  // A cancel or guardrail that interrupted a turn: no result brought that turn's spend (a cancel in the pause before
  // a retry brings none at all), so the ledger's books for the turn count — every attempt's calls.
  if (turnInFlight && (result.status === 'cancelled' || result.status === 'stopped')) {
    const { turn, before } = turnInFlight;
    const spent = await CancellationScope.nonCancellable(() => turnSpent({ workflowId, runId, turn })).catch(() => undefined);
    if (spent) {
      // The turn's whole spend replaces whatever part of it a failure already folded in.
      update(foldFailedSpend({ ...state, ...before }, spent));
      result = { ...result, usage: state.usage, costUsd: state.costUsd };
    }
  }

  // ---- the deliverable of a run on a repository, before the workspace goes -------------------------
  if (state.policy && delivers(state, result.status)) {
    setPhase('ending', `delivering branch ${state.repository!.branch}`);
    const deliverable = await deliverRun(state.policy, state, { workflowId, status: result.status, summary: result.result ?? result.reason ?? result.status });
    result = { ...result, deliverable };
  }

  // ---- compensation: on every exit path, never cancelled, idempotent ---------------------------
  approvals.runEnded(result.status);
  // Every outcome but success ends in Temporal's terms: Failed or Canceled (outcomes.ts).
  const inTemporalTerms = result.status !== 'succeeded';
  setPhase(result.status, `${result.reason ?? result.result?.slice(0, 120) ?? result.status}${result.deliverable ? ` · deliverable: ${deliverableLine(result.deliverable)}` : ''}`);
  // Before the agent is resolved syncAttributes writes nothing: the status must still leave `starting`.
  if (inTemporalTerms && !state.policy) upsertSearchAttributes([{ key: statusAttribute, value: result.status }]);
  if (state.policy) {
    const { sandbox, policy } = state;
    // Once the end has failed, its retries pause on workflow timers (`endSessionPatiently`), so `status` answers.
    let patient = false;
    const end = () => endSessionWhereItLives(policy, { workflowId, sandbox, releaseSandbox: !policy.sharesParentWorkspace, status: result.status, result }, patient ? endSessionPatiently : endSession);
    const failing = (failures: number, err: unknown) => {
      sessionEnd = { state: 'failing', failures, lastError: failureMessage(err) };
      patient = true;
    };
    await CancellationScope.nonCancellable(() => untilDone(end, failing));
    sessionEnd = undefined;
  }
  if (inTemporalTerms) {
    if (result.status === 'cancelled') {
      // Only Temporal's cancel request ends a workflow Canceled; the client sends it right after the signal.
      const root = CancellationScope.current();
      if (inbox.interruption?.kind === 'cancel' && !root.consideredCancelled) await sleep(CANCEL_REQUEST_GRACE_MS, { summary: 'cancel request grace' }).catch(() => undefined);
      // A Canceled workflow carries no details: its typed result goes in the memo.
      upsertMemo({ [OUTCOME_MEMO_KEY]: result });
      if (root.consideredCancelled) throw runCancelled(result);
    }
    throw runFailure(result);
  }
  return result;

  function failureResult(err: unknown): AgentRunResult {
    if (isCancellation(err) || inbox.interruption) {
      const why = inbox.interruption ?? { kind: 'cancel' as const, reason: 'cancelled by Temporal cancel request' };
      if (why.kind === 'guardrail') return runResult(state, workflowId, { status: 'stopped', guardrail: why.guardrail, reason: why.reason });
      return runResult(state, workflowId, { status: 'cancelled', reason: why.reason });
    }
    const cause = err instanceof ActivityFailure && err.cause ? err.cause : err;
    if (cause instanceof ApplicationFailure) {
      return runResult(state, workflowId, { status: 'failed', reason: cause.message, failureType: cause.type ?? 'ApplicationFailure' });
    }
    // A bug in the loop: still end the session, and say what happened.
    const message = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
    return runResult(state, workflowId, { status: 'failed', reason: `internal error in the run loop: ${message}`, failureType: FailureTypes.InternalError });
  }
}

/** The policy a failed `openRun` carries when its agent resolved before the session failed to start. */
function openRunPolicy(err: unknown): OpenRunFailure['policy'] | undefined {
  const cause = err instanceof ActivityFailure ? err.cause : err;
  const details = cause instanceof ApplicationFailure ? (cause.details?.[0] as Partial<OpenRunFailure> | undefined) : undefined;
  return details?.policy;
}

/**
 * Compensation never fails the run: `endSession` (idempotent) is retried, with a growing pause, until it succeeds —
 * a sandbox or ledger that is down for a while only delays the end.
 */
async function untilDone(step: () => Promise<void>, onFailure: (failures: number, err: unknown) => void): Promise<void> {
  for (let failures = 0; ; failures++) {
    try {
      return await step();
    } catch (err) {
      if (isCancellation(err)) throw err;
      onFailure(failures + 1, err);
      await sleep(untilDoneDelayMs(failures), { summary: 'retry backoff: ending the session' });
    }
  }
}
