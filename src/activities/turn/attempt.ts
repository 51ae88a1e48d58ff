/**
 * One attempt of a turn: its heartbeat, progress events, cancellation, the accounting of its harness runs and
 * what it spent. Accounting waits for the ledger; only a cancelled attempt stops waiting, after a grace period, so a
 * cancellation always completes.
 */
import { ApplicationFailure, Context, heartbeat } from '@temporalio/activity';
import type { SandboxHandle, SandboxRef } from '../../sandbox/types.js';
import type { FrozenSpec } from '../../spec/index.js';
import { DEFAULT_PROGRESS_INTERVAL_MS } from '../../workflows/progress.js';
import type { TurnRequest, TurnSpend } from '../../workflows/types.js';
import type { Deps } from '../deps.js';
import { waitForLedger } from '../ledger-wait.js';
import { redactFailure, type Redactor } from '../redaction.js';
import { TurnAccounting } from './accounting.js';
import type { HarnessRun } from './drive.js';
import { workerClient } from './gate.js';
import { ProgressEvents } from './progress-events.js';
import { startProgressSignals } from './progress-signal.js';
import { earlierSpend, spendOf, withEarlier, type EarlierSpend } from './spend.js';
import { superseded } from './stale.js';

/** How often a running turn looks whether its progress changed, to heartbeat it. */
export const HEARTBEAT_CHECK_MS = 250;
/** A turn whose progress did not change heartbeats anyway this often (cancellation from another host rides on it). */
export const HEARTBEAT_KEEPALIVE_MS = 2000;

/** How long a turn stopped by its run's cancel waits for Temporal's cancellation before failing (retryable). */
export const CANCEL_CONFIRM_MS = 10_000;

/** A turn request with the run it belongs to. */
export type TurnRun = Omit<TurnRequest, 'sandbox'> & { readonly sandbox: SandboxRef; readonly workflowId: string; readonly runId: string };

/** The heartbeat details of a running turn. */
export interface TurnProgress {
  turn: number;
  attempt: number;
  lastEvent: string;
  tokens: number;
  costUsd: number;
  events: number;
  /** `ok`, or why the turn waits for the ledger (shown by `status` as "ledger NOT WRITABLE"). */
  ledger: string;
  pendingApproval?: string;
  /** What the run's egress gateway metered and refused this turn (sandboxes behind one). */
  network?: string;
}

/** How a harness run's prompt run is closed (the attempt adds how long it took and what the harness reported). */
export type RunFinish = Omit<Parameters<TurnAccounting['finish']>[0], 'resumed' | 'durationMs'>;

export interface Attempt {
  readonly attempt: number;
  /** This attempt's ledger id: `<run>:<activity>:<turn>:<attempt>`. */
  readonly attemptId: string;
  readonly progress: TurnProgress;
  readonly events: ProgressEvents;
  /** Heartbeats the progress now. */
  readonly beat: () => void;
  readonly ledgerState: (err: Error | undefined) => void;
  /** Aborted when the turn is cancelled or a budget crossed mid-turn stops it. */
  readonly signal: AbortSignal;
  /**
   * Whether Temporal cancelled this attempt. After the run's workflow stopped the turn on this process (stops.ts),
   * it waits for Temporal's cancellation to follow (with the next heartbeat response), at most `confirmMs`.
   */
  readonly cancelled: () => Promise<boolean>;
  /** Whether the run's workflow stopped this attempt on this process (then `signal.reason` says so, `TurnStopped`). */
  readonly stoppedHere: () => boolean;
  /** Stops the harness (a budget crossed mid-turn). */
  readonly stop: (reason: Error) => void;
  /** The attempt's harness runs, each added before its harness starts. */
  readonly runs: HarnessRun[];
  /** Whether `attemptId` is an attempt of this scheduling (its spend counts against the budget this turn was given). */
  readonly sameScheduling: (attemptId: string) => boolean;
  readonly accountingFor: (attemptId: string) => TurnAccounting;
  /** The turn's spend as the workflow counts it: this attempt's, plus its earlier attempts'. */
  readonly spent: (usageMissing?: boolean) => TurnSpend;
  /** Closes the harness run's prompt run (once), with what became of it. */
  readonly finish: (run: HarnessRun, f: RunFinish) => Promise<void>;
  /** What to throw for `err`, which ended the attempt: its open prompt runs closed, its spend attached. */
  readonly failed: (err: unknown, redact: Redactor) => Promise<unknown>;
  /** The attempt's end on every path: leftovers killed, the sandbox released, progress given a moment. */
  readonly close: (handle: SandboxHandle | undefined) => Promise<void>;
}

export function openAttempt(deps: Deps, spec: FrozenSpec, req: TurnRun): Attempt {
  const ctx = Context.current();
  const info = ctx.info;
  const { runId } = req;
  // One attempt of one scheduling of this turn: Temporal retries, operator retries and fresh-session replays
  // each get their own id, so their rows never collide and none is counted twice.
  const scheduling = `${runId}:${info.activityId}:${req.turn}`;
  const attemptId = `${scheduling}:${info.attempt}`;
  const progress: TurnProgress = { turn: req.turn, attempt: info.attempt, lastEvent: 'starting', tokens: 0, costUsd: 0, events: 0, ledger: 'ok' };
  const ledgerState = (err: Error | undefined) => {
    progress.ledger = err ? `waiting for the ledger: ${err.message}` : 'ok';
    if (err) ctx.log.warn('ledger write failed; retrying', { workflowId: req.workflowId, turn: req.turn, error: err.message });
  };
  const events = new ProgressEvents(deps.ledger, { workflowId: req.workflowId, runId, turn: req.turn }, { onFault: ledgerState });
  // A heartbeat when the progress changed, else every HEARTBEAT_KEEPALIVE_MS; the worker sends at most one per
  // `heartbeatThrottle` (src/worker.ts), the latest. The starting state is no news.
  let sent = JSON.stringify(progress);
  let sentAt = Date.now();
  const beat = () => {
    sent = JSON.stringify(progress);
    sentAt = Date.now();
    heartbeat({ ...progress });
  };
  const timer = setInterval(() => {
    if (Date.now() - sentAt >= HEARTBEAT_KEEPALIVE_MS || JSON.stringify(progress) !== sent) beat();
  }, deps.heartbeatIntervalMs ?? HEARTBEAT_CHECK_MS);
  // The run's current details follow the turn at a bounded rate (a signal to its own run: events in its history).
  const stopNotes = startProgressSignals(progress, { client: workerClient(ctx), run: { workflowId: req.workflowId, runId }, intervalMs: spec.agent.progressIntervalMs ?? DEFAULT_PROGRESS_INTERVAL_MS, log: ctx.log });
  // The harness stops when the turn is cancelled or its streaming usage crosses the budget.
  const stopTurn = new AbortController();
  const runs: HarnessRun[] = [];
  let giveUp: NodeJS.Timeout | undefined;
  const onCancel = () => {
    stopTurn.abort(ctx.cancellationSignal.reason);
    giveUp = setTimeout(() => {
      for (const r of runs) r.accounting.stop('the attempt was cancelled and the ledger stayed unwritable');
    }, deps.cancelledAccountingGraceMs ?? 10_000);
  };
  ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
  // The run's workflow decided to cancel this turn, on this process: the harness dies now, not at the next heartbeat.
  let stoppedHere: string | undefined;
  const unregister = deps.turnStops.register(req.workflowId, runId, (reason) => {
    if (stopTurn.signal.aborted) return;
    stoppedHere = reason;
    progress.lastEvent = `stopping: ${reason}`.slice(0, 200);
    stopTurn.abort(ApplicationFailure.retryable(`the run stopped this turn (${reason}), and Temporal's cancellation did not follow`, 'TurnStopped'));
  });
  // Waited for once: the outcome and the failure path both ask, and the second must not wait again.
  let confirmed: Promise<boolean> | undefined;
  const cancelled = (): Promise<boolean> => {
    if (ctx.cancellationSignal.aborted || stoppedHere === undefined) return Promise.resolve(ctx.cancellationSignal.aborted);
    return (confirmed ??= (async () => {
      // Temporal's cancellation comes with a heartbeat response: keep one pending until it does.
      const deadline = Date.now() + (deps.cancelConfirmMs ?? CANCEL_CONFIRM_MS);
      while (!ctx.cancellationSignal.aborted && Date.now() < deadline) {
        beat();
        await ctx.sleep(Math.min(250, Math.max(1, deadline - Date.now()))).catch(() => undefined);
      }
      return ctx.cancellationSignal.aborted;
    })());
  };
  /** What earlier attempts of this scheduling spent (failed, timed out, lost with their worker): read once, on a retry. */
  let earlier: EarlierSpend | undefined;
  const spent = (usageMissing = false): TurnSpend => withEarlier(spendOf(runs, info.attempt, usageMissing), earlier);

  const finish = async (run: HarnessRun, f: RunFinish) => {
    if (run.finished) return;
    run.finished = true;
    progress.lastEvent = `recording turn ${req.turn}`;
    const sessionId = run.turn?.sessionId ?? run.sessionId;
    const model = run.turn?.model ?? run.model;
    await run.accounting.finish({
      ...f,
      resumed: run.turn?.resumed === true || run.resumed,
      durationMs: Date.now() - run.startedAt,
      ...(sessionId ? { externalSessionId: sessionId } : {}),
      ...(model ? { reportedModel: model } : {}),
    });
    // Every row of this attempt landed, re-reported calls of earlier attempts included: read what those spent.
    if (info.attempt > 1) earlier = await waitForLedger(() => earlierSpend(deps.ledger, req.workflowId, runId, req.turn, scheduling, attemptId));
  };

  return {
    attempt: info.attempt,
    attemptId,
    progress,
    events,
    beat,
    ledgerState,
    signal: stopTurn.signal,
    cancelled,
    stoppedHere: () => stoppedHere !== undefined,
    stop: (reason) => stopTurn.abort(reason),
    runs,
    sameScheduling: (id) => id.startsWith(`${scheduling}:`),
    accountingFor: (id) =>
      new TurnAccounting(
        deps.ledger,
        { workflowId: req.workflowId, runId, turn: req.turn, attempt: info.attempt, attemptId: id },
        {
          prices: spec.harness.prices,
          budget: req.budget,
          onFault: ledgerState,
          onAbandoned: (row, reason) => ctx.log.error('ledger row NOT written (enter it by hand once the ledger is back)', { row, reason }),
        },
      ),
    spent,
    finish,
    async failed(err, redact) {
      // Stopped here on the run's cancel: the attempt ends as Temporal's cancellation once that arrives.
      if (stoppedHere !== undefined && (await cancelled())) err = ctx.cancellationSignal.reason ?? err;
      // Anything else that ended the attempt (a sandbox error, a throw above) still closes its prompt runs.
      const message = redact(err instanceof Error ? err.message : String(err));
      for (const r of runs) {
        if (!r.finished && r.accounting.begun) {
          await finish(r, { status: ctx.cancellationSignal.aborted ? 'cancelled' : 'failed', outputUsed: false, output: '', error: message }).catch(() => undefined);
        }
      }
      if (err instanceof ApplicationFailure || !runs.some((r) => r.accounting.begun)) return redactFailure(err, redact);
      // Attach what the attempt spent, so the workflow can count it without reading the ledger.
      return ApplicationFailure.retryable(message, (err as { type?: string }).type ?? (err instanceof Error ? err.name : 'Error'), { spend: spent() });
    },
    async close(handle) {
      ctx.cancellationSignal.removeEventListener('abort', onCancel);
      unregister();
      clearTimeout(giveUp);
      clearInterval(timer);
      stopNotes();
      // Every descendant of the turn dies with it, also those that left its process group — unless Temporal
      // already gave this turn to a newer attempt (timed out / no longer known), whose processes those now are.
      if (handle && !superseded(ctx.cancellationSignal)) await handle.killLeftovers().catch(() => undefined);
      await handle?.release().catch(() => undefined);
      // Progress is not accounting: give its writes a moment, then let them go.
      await events.close(2000);
    },
  };
}
