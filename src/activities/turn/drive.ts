/**
 * Drives the harness for one harness run of a turn attempt: the one place the activities call into a harness
 * driver (one `runDriverTurn` over its record), so a change of the driver contract touches this file only.
 */
import { LOOPBACK_SERVER_NAME } from '../../contracts/loopback.js';
import { Context } from '@temporalio/activity';
import { runDriverTurn } from '../../adapters/engine.js';
import { collectTurn } from '../../adapters/fold.js';
import { findDriver } from '../../adapters/registry.js';
import { StopAtOnce, type HarnessEvent } from '../../adapters/types.js';
import { promptWithContract } from '../../catalog/index.js';
import type { SandboxHandle } from '../../sandbox/types.js';
import type { FrozenSpec } from '../../spec/index.js';
import { clipText as clip } from '../../workflows/bounds.js';
import { totalTokens } from '../../contracts/usage.js';
import type { Deps } from '../deps.js';
import { failureOf } from '../failures.js';
import { waitForLedger } from '../ledger-wait.js';
import { redactStream, type Redactor } from '../redaction.js';
import type { BudgetCrossing, TurnAccounting } from './accounting.js';
import type { Attempt, TurnRun } from './attempt.js';
import type { TurnGate } from './gate.js';
import { spendOf } from './spend.js';

/** One harness run of a turn attempt (two when a forgotten session is replaced by a fresh one) and its accounting. */
export interface HarnessRun {
  readonly accounting: TurnAccounting;
  /** The operator was told (once) that this run printed a line too large to read. */
  oversizedLogged?: boolean;
  readonly startedAt: number;
  finished: boolean;
  usageReported: boolean;
  turn?: Awaited<ReturnType<typeof collectTurn>>;
  sessionId?: string;
  model?: string;
  resumed: boolean;
  crossing?: BudgetCrossing;
}

/** What driving the harness once needs. */
export interface DriveOptions {
  readonly deps: Deps;
  readonly spec: FrozenSpec;
  readonly req: TurnRun;
  /** The attempt this run belongs to: its progress, events, stop signal and runs. */
  readonly attempt: Attempt;
  readonly handle: SandboxHandle;
  /** The run's credentials as the harness's environment. */
  readonly secretEnv: Readonly<Record<string, string>>;
  readonly gate: TurnGate;
  /** Whether the harness asked past the permission cap: its requests' events are then not written one by one. */
  readonly overCap: () => boolean;
  readonly redact: Redactor;
  /** The run's accounting (its own attempt id: a fresh session after a forgotten one is an attempt of its own). */
  readonly accounting: TurnAccounting;
  /** What the harness is given (the turn's message, with the conversation replayed into a fresh session). */
  readonly input: string;
  readonly resumeSessionId?: string;
  /** The turn's own message, as the ledger keeps it (a replay is rebuilt from these rows, never stored again). */
  readonly message: string;
  /** The run's egress gateway: the harness's base URL is its sandbox side (`undefined`: no vendor behind it). */
  readonly door?: { readonly baseUrl: string | undefined; readonly mcp?: { readonly url: string; readonly tokenEnv: string } };
}

/**
 * Runs the driver's turn for one harness run (resumed or not): opens its prompt run, records every usage event as
 * it streams, and folds the stream (the engine kills the turn's process when the stream ends). The run is added to the attempt's runs before the
 * harness starts, so whatever ends the attempt can still close its prompt run.
 */
export async function driveHarness(options: DriveOptions): Promise<HarnessRun> {
  const { deps, spec, req, attempt, handle, secretEnv, gate, redact, accounting, input, resumeSessionId, message } = options;
  const { progress, events, signal } = attempt;
  const driver = findDriver(deps.adapters, spec.harness.driverClass);
  const run: HarnessRun = { accounting, startedAt: Date.now(), finished: false, usageReported: false, resumed: false };
  attempt.runs.push(run);
  // The attempt's prompt run first: an unresolvable id fails before any token is spent, and while the ledger
  // cannot be written the turn waits (heartbeating) instead of spending tokens nobody would record.
  progress.lastEvent = 'opening the prompt run';
  try {
    await accounting.begin(
      { promptId: spec.agent.promptId, vendorId: spec.harness.vendor, modelId: `${spec.harness.vendor}/${spec.harness.model}`, input: redact(message) },
      attempt.sameScheduling,
    );
  } catch (err) {
    const failure = failureOf(err);
    if (failure !== err) throw failure;
    if (signal.aborted) throw signal.reason ?? err;
    throw err;
  }
  // A harness without a system prompt gets the contract in its input instead (on a fresh session).
  const prompt = spec.harness.capabilities.systemPrompt || resumeSessionId !== undefined ? input : promptWithContract(spec.agent.systemPrompt, input);
  const turn = runDriverTurn(
    driver,
    {
      runId: req.workflowId,
      harnessName: spec.harness.name,
      executable: spec.harness.executable,
      baseArgs: spec.harness.args,
      model: spec.harness.model,
      workspacePath: req.sandbox.workspacePath,
      hostWorkspacePath: req.sandbox.hostWorkspacePath,
      env: { ...spec.harness.env, ...secretEnv },
      resumeSessionId,
      baseUrl: options.door ? options.door.baseUrl : spec.harness.baseUrl,
      ...(options.door?.mcp ? { mcp: { name: LOOPBACK_SERVER_NAME, ...options.door.mcp } } : {}),
      timeoutMs: spec.harness.turnTimeoutMs,
      maxReplyBytes: spec.harness.maxReplyBytes,
      // A catalog that declares `capabilities.sessionFork` asks the driver to fork resumed sessions.
      settings: spec.harness.capabilities.sessionFork !== undefined ? { forkSessions: spec.harness.capabilities.sessionFork, ...spec.harness.settings } : (spec.harness.settings ?? {}),
      // The driver's state between turns lives in the ledger, out of the harness's reach.
      state: {
        get: (key) => waitForLedger(() => deps.ledger.getHarnessState(req.workflowId, key)),
        set: (key, value) => waitForLedger(() => deps.ledger.setHarnessState(req.workflowId, key, value)),
      },
      prompt,
      turn: req.turn,
      attemptId: accounting.attemptId,
      ...(spec.harness.capabilities.systemPrompt ? { systemPrompt: spec.agent.systemPrompt } : {}),
      posture: spec.agent.permissions.posture,
    },
    // A prepared home only where the worker's CLI is the harness's: the local sandbox runs this host's binary.
    { executor: handle.executor, fs: handle.fs, gate, signal, ...(req.sandbox.provider === 'local' ? { homeTemplates: deps.homeTemplates } : {}) },
  );
  // Durable: the harness may forget it (it re-reports what was never acknowledged).
  accounting.onRecorded = (ack) => turn.acknowledge(ack);
  // Every event is redacted as it leaves the driver: nothing below sees a harness string unredacted (the
  // gate sees a permission request as asked, to decide on it, and stores it redacted).
  run.turn = await collectTurn(redactStream(turn, redact), (event) => {
    progress.events += 1;
    // A usage report is not something the harness does: it keeps the last thing it did as lastEvent.
    if (event.type !== 'usage' || progress.lastEvent === 'starting') progress.lastEvent = describeEvent(event, redact);
    if (event.type === 'usage') {
      run.usageReported = true;
      const cost = event.costUsd !== undefined ? { costUsd: event.costUsd } : {};
      const crossed = event.recovered
        ? accounting.recordRecovered({ usage: event.usage, ...cost, recovered: event.recovered })
        : accounting.recordUsage({ usage: event.usage, ...cost, ...(event.call !== undefined ? { call: event.call } : {}) });
      const total = spendOf([run], 0);
      progress.tokens = totalTokens(total.usage);
      progress.costUsd = total.costUsd;
      if (crossed && !run.crossing) {
        run.crossing = crossed;
        progress.lastEvent = crossed.reason;
        attempt.stop(new StopAtOnce(crossed.reason));
      }
    }
    const flooded = options.overCap() && (event.type === 'permission-request' || event.type === 'permission-decision');
    if (event.type === 'text' || flooded) return;
    // What the operator must see is always written; the rest of the stream within the per-turn rate cap.
    if (alwaysWritten.has(event.type)) events.append(event.type, clipEvent(event));
    else events.progress(event.type, clipEvent(event));
    if (event.type === 'output-sampled') Context.current().log.warn(`turn ${req.turn} of ${req.workflowId}: ${sampledSummary(event)}`);
    if (event.type === 'line-too-large' && !run.oversizedLogged) {
      run.oversizedLogged = true;
      Context.current().log.warn(`turn ${req.turn} of ${req.workflowId}: the harness printed a line of ${event.bytes} bytes, over the limit of ${event.limit}; it was not read`);
    }
  });
  // The session the turn ran in, from its terminal event (redacted with the stream).
  run.sessionId = run.turn.sessionId ?? optional(resumeSessionId, redact);
  run.model = run.turn.model;
  run.resumed = run.turn.resumed;
  return run;
}

/**
 * Events of the harness's stream written whatever the rate: the turn's end, the counts of what was not written, and
 * permission events (bounded by the permission cap per turn).
 */
const alwaysWritten = new Set<HarnessEvent['type']>(['turn-complete', 'session-error', 'output-sampled', 'permission-request', 'permission-decision']);

/** An `output-sampled` event as the operator's log line. */
function sampledSummary(e: Extract<HarnessEvent, { type: 'output-sampled' }>): string {
  const parts = [];
  if (e.unknownLines > e.unknownReported) parts.push(`${e.unknownLines} lines the runtime does not understand (the first ${e.unknownReported} recorded as events)`);
  if (e.tooLargeLines > e.tooLargeReported) parts.push(`${e.tooLargeLines} lines over the line limit (the first ${e.tooLargeReported} recorded)`);
  return `the harness printed ${parts.join(' and ')}; the rest were only counted`;
}

/** The ledger's live events keep a turn's final text short: the whole reply is in its prompt-run row. */
function clipEvent(event: HarnessEvent): HarnessEvent {
  return event.type === 'turn-complete' && event.text.length > 4096 ? { ...event, text: clip(event.text, 4096) } : event;
}

/** A harness-reported value that did not come through the event stream, redacted. */
function optional(value: string | undefined, redact: Redactor): string | undefined {
  return value === undefined ? undefined : redact(value);
}

/** The event as the heartbeat's `lastEvent`. */
function describeEvent(event: HarnessEvent, redact: (s: string) => string): string {
  switch (event.type) {
    case 'activity':
      return redact(event.description).slice(0, 200);
    case 'text':
      return 'writing';
    case 'usage':
      return `usage ${totalTokens(event.usage)} tokens`;
    case 'session':
      return `session ${event.sessionId}`;
    case 'permission-request':
      return redact(`asks permission: ${event.tool} ${event.title}`).slice(0, 200);
    case 'permission-decision':
      return redact(`${event.decision === 'allow' ? 'allowed' : 'denied'} ${event.tool} (${event.decidedBy})`).slice(0, 200);
    case 'turn-complete':
      return 'turn complete';
    case 'line-too-large':
      return `a line of ${event.bytes} bytes, over the limit of ${event.limit}, not read`;
    case 'session-error':
      return `error: ${redact(event.message).slice(0, 200)}`;
    default:
      return event.type;
  }
}
