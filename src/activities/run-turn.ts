/**
 * `runTurn`: one turn, inside one attempt: run the actions the workflow approved → drive the harness (heartbeating;
 * dies with the turn when cancelled) → account for it as it streams → validate the envelope → return a small result.
 * Its stages are in turn/.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { resolveCredentials } from '../credentials/index.js';
import { reportTurnIdentity } from '../observability/turn-telemetry.js';
import type { SandboxHandle } from '../sandbox/types.js';
import { MAX_HARNESS_MESSAGE_CHARS, clipText as clip } from '../workflows/bounds.js';
import type { TurnRequest, TurnResult } from '../workflows/types.js';
import { expandSandbox } from '../workflows/types.js';
import { attemptDeadlineMs } from './approvals.js';
import type { Deps } from './deps.js';
import { FailureTypes } from '../contracts/failures.js';
import { mapped, permanent } from './failures.js';
import { findDriver } from '../adapters/registry.js';
import { totalTokens } from '../contracts/usage.js';
import { StopAtOnce } from '../adapters/types.js';
import type { BudgetCrossing } from './turn/accounting.js';
import { openAttempt, type Attempt, type TurnRun } from './turn/attempt.js';
import { behindDoor, type MeteredTurn, type RunDoor } from './turn/door.js';
import { spendOf } from './turn/spend.js';
import { composeInput, withHistory } from './turn/compose-input.js';
import { driveHarness } from './turn/drive.js';
import { turnGate } from './turn/gate.js';
import { outcomeOf } from './turn/outcome.js';
import { stopIfStale } from './turn/stale.js';
import { claimSharedWorkspace } from './workspace-claim.js';

/**
 * Accounting is the activity's own, per attempt and per model call: the attempt's prompt run is opened before the
 * harness starts, every usage event is a ledger row at once, and the row is closed with what became of the
 * attempt, so a failed, killed or lost attempt's tokens are in the ledger too (and in a failure's details). With
 * `budget`, streaming usage that crosses the run's remaining tokens or cost stops the harness mid-turn
 * (`budgetExhausted`).
 */
export async function runTurn(deps: Deps, request: TurnRequest): Promise<TurnResult> {
  // Handed to this worker while it was frozen, and already timed out: stop before touching the sandbox.
  await stopIfStale(request.turn);
  const spec = await deps.loadSpec(request.specHash);
  const { name: harnessName, driverClass, vendor, model } = spec.harness;
  reportTurnIdentity({ agent: spec.agent.name, harness: harnessName, driverClass, vendor, model });
  const ctx = Context.current();
  const info = ctx.info;
  if (!info.workflowExecution) throw ApplicationFailure.nonRetryable('runTurn runs only as an activity of an agentRun workflow', FailureTypes.TurnFailed);
  // The ledger's run: this execution's run id, which the ledger resolves to the run's row (continue-as-new
  // executions have another id: the ledger then takes the latest run of the workflow id, the open one).
  const runId = info.workflowExecution.runId;
  const req: TurnRun = { ...request, sandbox: expandSandbox(request.sandbox), workflowId: info.workflowExecution.workflowId, runId };
  const credentials = permanent(
    () => resolveCredentials({ agent: { name: spec.agent.name, credentials: [...spec.agent.credentials] }, harness: spec.harness, store: deps.credentials, env: deps.env, log: ctx.log }),
    FailureTypes.CredentialMissing,
  );
  // The run's egress gateway, when its sandbox goes through one: the harness gets a placeholder for its key.
  const driver = findDriver(deps.adapters, spec.harness.driverClass);
  const door = await mapped(() => deps.gateways.open({ ref: req.sandbox, workflowId: req.workflowId, runId, spec, driver, env: credentials.env, ledger: deps.ledger, workerEnv: deps.env }));
  const behind = door && req.sandbox.gateway ? behindDoor(door, req.sandbox.gateway.port, spec, driver, credentials.env) : undefined;
  const redact = deps.redactorFor(door ? [...credentials.secrets, door.placeholder, ...(door.loopback ? [door.loopback.token] : [])] : credentials.secrets);
  const attempt = openAttempt(deps, spec, req);
  if (door) {
    const onSpent = (crossing: BudgetCrossing) => {
      // The gateway saw the budget spent on the wire before the harness said so: the turn stops as it would then.
      const run = attempt.runs.at(-1);
      if (!run || run.crossing) return;
      run.crossing = crossing;
      attempt.progress.lastEvent = crossing.reason;
      attempt.stop(new StopAtOnce(crossing.reason));
    };
    door.beginTurn({ turn: req.turn, attemptId: attempt.attemptId, budget: req.budget, prices: spec.harness.prices, onSpent }, attempt.ledgerState);
    // The heartbeat (the Temporal UI's pending activity) shows what the gateway metered and refused.
    Object.defineProperty(attempt.progress, 'network', { enumerable: true, get: () => networkLine(door.metered()) });
  }
  const { progress, events, beat } = attempt;
  const { gate, overCap } = turnGate(deps, spec, req, attempt, redact);
  let handle: SandboxHandle | undefined;
  try {
    // A shared workspace is one run's at a time (workspace-claim.ts): wait for it, or refuse, as configured.
    let waitAnnounced = false;
    await claimSharedWorkspace({
      ledger: deps.ledger,
      scope: spec.agent.sandbox.workspaceScope,
      mode: spec.agent.sandbox.concurrentRuns ?? 'wait',
      sandbox: req.sandbox,
      holder: { workflowId: req.workflowId, runId },
      deadlineMs: attemptDeadlineMs(info),
      signal: attempt.signal,
      pollMs: deps.approvalPollMs,
      onWait: (detail, holder) => {
        if (detail && !waitAnnounced) {
          waitAnnounced = true;
          events.append('workspace-wait', { holder: holder.workflowId, workspace: req.sandbox.hostWorkspacePath });
        }
        progress.lastEvent = detail ?? 'starting';
        beat();
      },
    });
    const attached = await mapped(() => deps.provider(req.sandbox.provider).attach(req.sandbox));
    handle = attached;
    if (info.attempt > 1 || request.cleanFirst) {
      // A crashed or timed-out earlier attempt may have left its process running: never run two at once.
      await attached.killLeftovers();
      if (info.attempt > 1) events.append('retry', { attempt: info.attempt });
    }
    // No heartbeat here: the attempt's timer sends one when the harness's progress changes.
    const prompt = await composeInput(deps, req, attached.fs, redact, events);
    const drive = (attemptId: string, input: string, resumeSessionId: string | undefined) => {
      door?.setAttempt(attemptId);
      return driveHarness({
        deps,
        spec,
        req,
        attempt,
        handle: attached,
        secretEnv: behind?.env ?? credentials.env,
        ...(door ? { door: { baseUrl: behind?.baseUrl, ...(behind?.mcp ? { mcp: behind.mcp } : {}) } } : {}),
        gate,
        overCap: () => overCap() !== undefined,
        redact,
        accounting: attempt.accountingFor(attemptId),
        input,
        resumeSessionId,
        message: prompt,
      });
    };
    let resumeFailed: string | undefined;
    let run = await drive(attempt.attemptId, req.replay ? await withHistory(deps, req, prompt, spec.agent.replayMaxTokens) : prompt, req.resumeSessionId);
    if (!attempt.signal.aborted && run.crossing === undefined && run.turn?.error?.code === 'resume-failed' && req.resumeSessionId !== undefined) {
      // The harness forgot the session: start fresh in this same attempt, with the conversation replayed. The
      // fresh run is an attempt of its own in the ledger (its calls never collide with the refused one's).
      resumeFailed = clip(redact(run.turn.error.message), MAX_HARNESS_MESSAGE_CHARS);
      await attempt.finish(run, { status: 'resume-failed', outputUsed: false, output: '', error: resumeFailed });
      events.append('resume-failed', { message: resumeFailed });
      run = await drive(`${attempt.attemptId}:fresh`, await withHistory(deps, req, prompt, spec.agent.replayMaxTokens), undefined);
    }
    const outcome = await outcomeOf({ deps, spec, req, attempt, run, redact, resumeFailed, permissionsOverCap: overCap() });
    const { refused, loopbackReads } = door?.metered() ?? { refused: 0, loopbackReads: 0 };
    return { ...outcome, ...(refused > 0 ? { networkRefused: refused } : {}), ...(loopbackReads > 0 ? { loopbackReads } : {}) };
  } catch (err) {
    throw await attempt.failed(err, redact);
  } finally {
    if (door) await endTurnAtDoor(door, attempt);
    await attempt.close(handle);
  }
}

/** The heartbeat's network line: model calls the gateway metered this turn, and requests it refused. */
function networkLine(m: MeteredTurn): string {
  const reads = m.loopbackReads ? `, ${m.loopbackReads} loopback read${m.loopbackReads === 1 ? '' : 's'}` : '';
  return `${m.calls} model call${m.calls === 1 ? '' : 's'} metered (${totalTokens(m.usage)} tokens)${m.refused ? `, ${m.refused} request${m.refused === 1 ? '' : 's'} refused` : ''}${reads}`;
}

/**
 * The turn's end at the gateway: model calls are refused until the next turn, its rows are written, and one event
 * compares what the wire carried with what the harness reported (a mismatch is flagged, the wire is the bill's truth).
 */
async function endTurnAtDoor(door: RunDoor, attempt: Attempt): Promise<void> {
  const metered = await door.endTurn();
  const reported = spendOf(attempt.runs, 0).usage;
  const meteredTokens = totalTokens(metered.usage);
  const reportedTokens = totalTokens(reported);
  attempt.events.append('network', {
    calls: metered.calls,
    meteredTokens,
    reportedTokens,
    models: metered.models,
    refused: metered.refused,
    ...(metered.loopbackReads ? { loopbackReads: metered.loopbackReads } : {}),
    ...(metered.calls > 0 && meteredTokens !== reportedTokens ? { mismatch: `the gateway metered ${meteredTokens} tokens, the harness reported ${reportedTokens}` } : {}),
  });
}
