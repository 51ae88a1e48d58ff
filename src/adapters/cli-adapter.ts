/**
 * Base class for adapters that drive a CLI: one process per turn, one output line at a time.
 *
 * It owns everything that must be the same for every harness: starting the process through the sandbox's
 * executor (never spawning itself), line framing, the turn timeout, cancellation, and the guarantee of exactly
 * one terminal event per turn, last. A subclass supplies only how to build a turn's command (`buildTurn`) and
 * how to map one output line to events (`mapLine`), plus optional hooks.
 *
 * Two-way protocols: the process's stdin can stay open for the whole turn (`keepStdinOpen`); `mapLine` can write
 * to it (`state.send`) to drive a JSON-RPC conversation, and a `permission-request` event it returns is decided by
 * the turn's gate while the process waits: the turn timeout is paused for the wait (the approval has its own
 * timeout), cancellation still ends it, and `answerPermission` writes the answer. What the CLI's protocol cannot
 * carry (a denial's reason, an edited input it cannot take) is kept as a note for a follow-up prompt
 * (`takeFollowUp`). Without a gate the request is only emitted and `respond()` answers it.
 */
import type { PermissionAnswer, PermissionRequest } from '../permissions/types.js';
import { defaultLineLimits, OversizedLine, type LineLimits, type OutputLine } from '../sandbox/line-queue.js';
import type { ExecProcess } from '../sandbox/types.js';
import type {
  Capabilities,
  HarnessAdapter,
  HarnessEvent,
  HarnessSessionConfig,
  PermissionPosture,
  PermissionReport,
  SessionErrorCode,
  TerminalEvent,
  TurnInput,
} from './types.js';
import { StopAtOnce } from './types.js';

/** How one turn's process is started. */
export interface TurnCommand {
  readonly argv: string[];
  /** Written to stdin; stdin is ignored when both this and `keepStdinOpen` are absent. */
  readonly stdin?: string;
  /** Added to the session's env for this turn. */
  readonly env?: Record<string, string>;
  /** Keep stdin open after `stdin` so `respond()` can write to it. */
  readonly keepStdinOpen?: boolean;
}

/** What `buildTurn` knows about the session. */
export interface TurnContext {
  readonly config: HarnessSessionConfig;
  readonly systemPrompt: string | undefined;
  readonly posture: PermissionPosture;
  /**
   * Session to continue this turn: the last one the harness reported, else the configured one; `undefined` when
   * the harness said it does not know that session (the turn then starts a fresh one).
   */
  readonly resumeSessionId: string | undefined;
  /**
   * Continue `resumeSessionId` in a NEW session branched from it (the CLI's fork), leaving it untouched: a retried
   * attempt then forks the same state again instead of resuming what the failed attempt appended.
   */
  readonly fork: boolean;
  /** The turn has an interactive permission gate: use the two-way mode, where the CLI asks before tools run. */
  readonly twoWay: boolean;
}

/** Per-turn state handed to `mapLine`. */
export interface LineState {
  readonly turn: number;
  readonly resumeSessionId: string | undefined;
  /** The turn forks `resumeSessionId`: a session event with another id is the branch, and counts as resumed. */
  readonly fork: boolean;
  /** The ledger id of this attempt, when the runtime gave one. */
  readonly attemptId: string | undefined;
  /** Free space for a subclass's mapper to carry facts between lines of one turn. */
  readonly scratch: Record<string, unknown>;
  /** Writes one line (a newline is added) to the process's stdin: for two-way protocols. */
  readonly send: (line: string) => void;
  /** Permission outcomes the CLI's protocol could not show the model; `takeFollowUp` turns them into a prompt. */
  readonly notes: string[];
  /** Follow-up prompts sent so far in this turn. */
  followUps: number;
  /** Usage events of this turn so far (recovered ones aside): the next one is the attempt's call `usageEvents + 1`. */
  usageEvents: number;
  /** Unknown lines and oversized lines of this turn, and how many of each were reported as events (a sample). */
  readonly output: { unknownLines: number; unknownReported: number; tooLargeLines: number; tooLargeReported: number; largest: OversizedLine | undefined };
}

/**
 * A call of an attempt whose usage was still to come when its turn waited for a permission decision (the CLI reports
 * it after the answer): if that attempt's process dies in the wait, a later turn books it as unknown usage.
 */
interface OpenCall {
  readonly attemptId: string;
  readonly turn: number;
  readonly call: number;
}

/** Where the run's state keeps the open calls (see `OpenCall`). */
export const openCallsKey = 'open-calls-at-permission-wait';

/** The answer as the CLI's protocol gets it: an emulated edit arrives as a denial (with a note). */
export interface WireAnswer {
  readonly allow: boolean;
  readonly message?: string;
  /** Only when the CLI takes edits natively. */
  readonly editedInput?: unknown;
  readonly scope: PermissionAnswer['scope'];
}

/** At most this many follow-up prompts per turn, so a model that keeps asking for denied tools cannot loop. */
const maxFollowUps = 3;

/** How long a process may keep running after its terminal line before it is killed. */
const defaultExitGraceMs = 3000;

/** How long a stopped turn's output is still read, once its process was killed, for the usage it reported. */
const stopDrainMs = 1000;

/**
 * How long a process that closed its stdout without a terminal line may live on before the turn ends (it can say
 * nothing more; it may still be about to exit with a code that explains itself).
 */
const defaultOutputClosedGraceMs = 3000;

/** Unknown lines (and oversized lines) reported one by one per turn; the rest are counted in one `output-sampled`. */
export const sampledLinesPerTurn = 20;

/** What an unknown line's event keeps of the line. */
const unknownRawChars = 2048;

/**
 * The line-processing loop gives the event loop a turn after this many lines or milliseconds, whichever comes
 * first: a flooding harness must never keep the worker from heartbeating, answering queries or starting runs.
 */
const yieldEveryLines = 256;
const yieldEveryMs = 5;
/** The longest a flooding turn waits between batches. */
const maxFloodPauseMs = 20;

/** `spent`: the caller aborted with `StopAtOnce` (a budget ran out); reported as `cancelled`, killed without grace. */
type StopReason = 'timeout' | 'cancelled' | 'spent';

/** Why and when the current turn must stop (timeout, abort or `end()`). */
interface TurnStop {
  reason: StopReason | undefined;
  readonly promise: Promise<StopReason>;
  /** The stop as a latch: `latch.race(p)` is `p` or the stop, whichever comes first, and keeps nothing once `p` settled. */
  readonly latch: Latch<{ readonly [stopped]: StopReason }>;
  readonly stop: (reason: StopReason) => void;
  /** Stops the timeout clock (a permission wait has its own timeout); `resume` restarts it with what was left. */
  readonly pause: () => void;
  readonly resume: () => void;
  readonly dispose: () => void;
}
const stopped = Symbol('stopped');

function isTerminal(event: HarnessEvent): event is TerminalEvent {
  return event.type === 'turn-complete' || event.type === 'session-error';
}

function sessionError(code: SessionErrorCode, message: string, extra?: { exitCode?: number | null; stderrTail?: string }): TerminalEvent {
  return { type: 'session-error', code, message, ...extra };
}

function lastLines(text: string, count: number): string {
  return text.trim().split('\n').slice(-count).join('\n');
}

/** Recognises "the binary is not there" from a local spawn (`spawn X ENOENT`) or a shell-less exec (127). */
function missingExecutable(stderrTail: string, code: number | null): string | undefined {
  const enoent = /spawn (\S+) ENOENT/.exec(stderrTail);
  if (enoent) return enoent[0];
  if (code === 127 && /not found|no such file/i.test(stderrTail)) return lastLines(stderrTail, 1);
  return undefined;
}

/** Base class for CLI harness adapters; see the file comment. */
export abstract class CliHarnessAdapter implements HarnessAdapter {
  abstract readonly driverClass: string;
  abstract readonly capabilities: Capabilities;

  protected config: HarnessSessionConfig | undefined;
  protected systemPrompt: string | undefined;
  protected posture: PermissionPosture = 'auto';
  /** Grace after the terminal line before the process is killed; subclasses may change it. */
  protected exitGraceMs = defaultExitGraceMs;
  /** Grace after stdout closed without a terminal line before a process still alive is killed. */
  protected outputClosedGraceMs = defaultOutputClosedGraceMs;

  private current: ExecProcess | undefined;
  /** Requests emitted without a gate, waiting for `respond()`. */
  private readonly unanswered = new Map<string, { request: PermissionRequest; state: LineState }>();
  private stopCurrent: ((reason: StopReason) => void) | undefined;
  private ended = false;
  private sessionId: string | undefined;
  private lastResumed = false;
  private lastModel: string | undefined;
  /** Sessions the harness said it does not know: never resumed again. */
  private readonly unknownSessions = new Set<string>();
  /** Open calls in the run's state (see `OpenCall`), and those this adapter re-reported (cleared when it ends). */
  private openCalls: OpenCall[] = [];
  private reReported: OpenCall[] = [];

  /**
   * Hook: what the harness prints on stderr when it does not know the session it was asked to resume. Checked
   * when a resumed turn's process exits without a terminal event, before `onExit`; a match ends the turn with
   * `resumeFailed` (code `resume-failed`).
   */
  protected readonly unknownSessionPattern?: RegExp;
  /** How `resume-failed` messages name the harness; the driver class when absent. */
  protected readonly harnessLabel?: string;
  /** What the harness calls a session in `resume-failed` messages. */
  protected readonly sessionNoun: string = 'session';

  /** Builds the command for one turn. */
  protected abstract buildTurn(input: TurnInput, ctx: TurnContext): TurnCommand;

  /** Maps one stdout line (never empty) to zero or more events. Throwing makes it an `unknown` event. */
  protected abstract mapLine(line: string, state: LineState): HarnessEvent | HarnessEvent[] | undefined;

  /**
   * Whether resumed turns fork their session: when the adapter declares `sessionFork`, unless the catalog's
   * `settings.forkSessions` is false.
   */
  protected forksSessions(config: HarnessSessionConfig): boolean {
    return this.capabilities.sessionFork === true && config.settings?.forkSessions !== false;
  }

  /** Hook: prepares the session (config files in a home inside the workspace). Throw to fail `start`. */
  protected async prepare(_config: HarnessSessionConfig): Promise<void> {}

  /**
   * Hook: usage of model calls the harness made (or started) but never reported because the turn ended early —
   * killed, cancelled, timed out, or exited without its terminal line. Yielded before that terminal event, so the
   * tokens of a failed attempt are still counted. Default: nothing more is known.
   */
  protected unreportedUsage(_state: LineState): HarnessEvent[] {
    return [];
  }

  /**
   * Hook: whether, at a permission request, a model call's usage is still to come (the CLI reports it only after the
   * answer). The base class then records the call in the run's state for the wait, so a worker that dies meanwhile
   * leaves it to be booked as unknown usage by the next turn. Default: no.
   */
  protected callOpenAtRequest(_state: LineState): boolean {
    return false;
  }

  /**
   * Hook: how long this harness's stdout lines may grow (see `LineLimits`). The default lets every line grow to
   * twice the reply cap — an adapter that can tell its terminal line from its opening narrows the others to 1 MiB.
   */
  protected lineLimits(config: HarnessSessionConfig): LineLimits {
    return { maxLineBytes: this.longLineBytes(config), maxLongLineBytes: this.longLineBytes(config) };
  }

  /** The longest terminal line: twice the reply cap (a reply's JSON escapes make its line longer than it). */
  protected longLineBytes(config: HarnessSessionConfig): number {
    return Math.max(defaultLineLimits.maxLineBytes, 2 * (config.maxReplyBytes ?? defaultLineLimits.maxLongLineBytes / 2));
  }

  /** Hook: the events for a line that was over its cap (never read). Default: one `line-too-large` event. */
  protected mapOversizedLine(line: OversizedLine, _state: LineState): HarnessEvent[] {
    return [{ type: 'line-too-large', bytes: line.bytes, limit: line.limit, opening: line.opening }];
  }

  /** Hook: a custom terminal event when the process exits without one; `undefined` for the default error. */
  protected onExit(_code: number | null, _stderrTail: string, _state: LineState): TerminalEvent | undefined {
    return undefined;
  }

  /**
   * The terminal event for "the harness does not know the session this turn resumed". It also remembers the
   * session, so later turns start fresh instead of resuming it. For adapters that see this in an output line;
   * stderr is covered by `unknownSessionPattern`.
   */
  protected resumeFailed(state: LineState, detail: { reason?: string; exitCode?: number | null; stderrTail?: string } = {}): TerminalEvent {
    const { reason, ...extra } = detail;
    const session = state.resumeSessionId ?? '(none)';
    if (state.resumeSessionId !== undefined) this.unknownSessions.add(state.resumeSessionId);
    const why = reason !== undefined ? ` (${reason})` : '';
    return sessionError(
      'resume-failed',
      `${this.harnessLabel ?? this.driverClass} no longer knows ${this.sessionNoun} ${session}${why}; start a fresh session and replay the conversation.`,
      extra,
    );
  }

  /** Hook: the stdin line (without newline) that acknowledges a recorded usage event; `undefined` = none. */
  protected formatUsageAck(_ack: { attemptId: string; call: number }): string | undefined {
    return undefined;
  }

  /** Hook: the stdin line (without newline) that answers a permission request; `undefined` = no hooks. */
  protected formatResponse(_requestId: string, _decision: { allow: boolean; message?: string; editedInput?: unknown }): string | undefined {
    return undefined;
  }

  /** Hook: writes the answer to a permission request in the CLI's protocol. The default writes `formatResponse`. */
  protected answerPermission(request: PermissionRequest, answer: WireAnswer, state: LineState): void {
    const line = this.formatResponse(request.id, {
      allow: answer.allow,
      ...(answer.message !== undefined ? { message: answer.message } : {}),
      ...(answer.editedInput !== undefined ? { editedInput: answer.editedInput } : {}),
    });
    if (line !== undefined) state.send(line);
  }

  /**
   * For a subclass at the point where its CLI ended the prompt: the follow-up prompt that tells the model what
   * its tools could not (a denial's reason, an edit to ask again with), or `undefined` when there is none (or
   * the turn already had its share). Consumes the notes.
   */
  protected takeFollowUp(state: LineState): string | undefined {
    if (state.notes.length === 0 || state.followUps >= maxFollowUps) return undefined;
    const notes = state.notes.splice(0);
    state.followUps += 1;
    return [
      'Permission decisions on your last tool requests (durable-harness):',
      ...notes.map((n) => `- ${n}`),
      'Continue the task with this in mind, and end with your JSON envelope as before.',
    ].join('\n');
  }

  /** Hook: what the posture becomes. The default is honest for adapters that translate nothing. */
  protected permissionReport(posture: PermissionPosture): PermissionReport {
    return { posture, enforced: false, note: `${this.driverClass} does not translate permission postures; the harness's own defaults apply.` };
  }

  /** Hook: releases session resources on `end()` (called once). */
  protected async onEnd(): Promise<void> {}

  get resumed(): boolean {
    return this.lastResumed;
  }

  get reportedModel(): string | undefined {
    return this.lastModel;
  }

  get externalSessionId(): string | undefined {
    return this.sessionId;
  }

  applyPermissionPolicy(posture: PermissionPosture): PermissionReport {
    this.posture = posture;
    return this.permissionReport(posture);
  }

  setSystemPrompt(text: string): void {
    this.systemPrompt = text;
  }

  async start(config: HarnessSessionConfig): Promise<void> {
    if (this.ended) throw new Error(`${this.driverClass} adapter was already ended; create a new one.`);
    this.config = config;
    this.sessionId = config.resumeSessionId;
    this.openCalls = openCallsOf(await config.state?.get(openCallsKey));
    await this.prepare(config);
  }

  /** Answers a request emitted without a gate; a no-op without hooks or a running turn. */
  async respond(requestId: string, decision: { allow: boolean; message?: string; editedInput?: unknown }): Promise<void> {
    const pending = this.unanswered.get(requestId);
    if (pending) {
      this.unanswered.delete(requestId);
      this.answerPermission(pending.request, { ...decision, scope: 'once' }, pending.state);
      return;
    }
    const line = this.formatResponse(requestId, decision);
    if (line !== undefined) this.current?.write(`${line}\n`);
  }

  /** Writes the formatted acknowledgement to the running process's stdin; a no-op without one or a running turn. */
  async acknowledgeUsage(ack: { attemptId: string; call: number }): Promise<void> {
    const line = this.formatUsageAck(ack);
    if (line !== undefined) this.current?.write(`${line}\n`);
  }

  async end(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    const proc = this.current;
    // A turn still running ends as cancelled (exactly one terminal event), not as an unexplained exit.
    this.stopCurrent?.('cancelled');
    this.current = undefined;
    await proc?.kill();
    // Re-reported open calls are booked (or queued) by now; a later turn would only book them again, idempotently.
    if (this.reReported.length > 0) await this.saveOpenCalls(this.openCalls.filter((c) => !this.reReported.includes(c))).catch(() => undefined);
    await this.onEnd();
  }

  runTurn(input: TurnInput): AsyncIterable<HarnessEvent> {
    return this.turn(input);
  }

  private refusal(input: TurnInput): TerminalEvent | undefined {
    if (this.ended) return sessionError('protocol-error', `${this.driverClass} adapter was ended; no more turns can run.`);
    if (!this.config) return sessionError('protocol-error', `${this.driverClass} adapter: runTurn was called before start.`);
    if (this.current) return sessionError('protocol-error', `${this.driverClass} adapter: a turn is already running.`);
    if (input.signal?.aborted) return sessionError('cancelled', 'The turn was cancelled before it started.');
    return undefined;
  }

  private async *turn(input: TurnInput): AsyncGenerator<HarnessEvent> {
    const refused = this.refusal(input);
    if (refused || !this.config) {
      yield refused ?? sessionError('protocol-error', 'not started');
      return;
    }
    const config = this.config;
    this.lastResumed = false;
    this.lastModel = undefined;
    const resumeSessionId = this.sessionId !== undefined && !this.unknownSessions.has(this.sessionId) ? this.sessionId : undefined;
    const fork = resumeSessionId !== undefined && this.forksSessions(config);
    const twoWay = input.gate?.interactive === true && this.capabilities.permissionHooks;
    const ctx: TurnContext = { config, systemPrompt: this.systemPrompt, posture: this.posture, resumeSessionId, fork, twoWay };
    const io: { proc?: ExecProcess } = {};
    const state: LineState = {
      turn: input.turn,
      resumeSessionId: ctx.resumeSessionId,
      fork,
      attemptId: input.attemptId,
      scratch: {},
      send: (line) => io.proc?.write(`${line}\n`),
      notes: [],
      followUps: 0,
      usageEvents: 0,
      output: { unknownLines: 0, unknownReported: 0, tooLargeLines: 0, tooLargeReported: 0, largest: undefined },
    };

    let proc: ExecProcess;
    let command: TurnCommand;
    try {
      command = this.buildTurn(input, ctx);
      proc = config.executor.exec({
        argv: command.argv,
        cwd: config.workspacePath,
        env: { ...config.env, ...command.env },
        stdin: command.stdin,
        keepStdinOpen: command.keepStdinOpen,
        lineLimits: this.lineLimits(config),
      });
    } catch (error) {
      yield sessionError('protocol-error', `${this.driverClass} could not start the turn: ${(error as Error).message}`);
      return;
    }
    this.current = proc;
    io.proc = proc;
    const stop = this.watchStop(input, config.turnTimeoutMs);
    this.stopCurrent = stop.stop;
    try {
      // Calls an earlier attempt left open when its process died in a permission wait: spent, count unknown.
      for (const open of this.openCalls.filter((c) => c.attemptId !== state.attemptId && !this.reReported.includes(c))) {
        this.reReported.push(open);
        yield { type: 'usage', usage: {}, recovered: open };
      }
      yield* this.drive(proc, command, state, stop, input);
    } finally {
      this.unanswered.clear();
      stop.dispose();
      if (this.current === proc) {
        this.current = undefined;
        this.stopCurrent = undefined;
      }
      await proc.kill();
    }
  }

  /** Reads lines until a terminal event, the end of output, or a stop; then yields the one terminal event. */
  private async *drive(proc: ExecProcess, command: TurnCommand, state: LineState, stop: TurnStop, input: TurnInput): AsyncGenerator<HarnessEvent> {
    const lines = (proc.output ?? proc.lines)[Symbol.asyncIterator]();
    const stopWins = stop.promise.then((reason) => ({ [stopped]: reason }) as const);
    const pace = new Pacer();
    let terminal: TerminalEvent | undefined;
    while (!terminal) {
      await pace.tick();
      const pending = lines.next();
      // Not Promise.race with the stop: each race would leave a reaction on the stop promise for the whole turn —
      // a million lines, a million retained promises.
      const next = await stop.latch.race(pending);
      // A stop that happened while we were suspended wins over output that ended because of it; a line read with
      // it (or still on its way) is drained for the usage it reports.
      if (stop.reason || stopped in next) {
        yield* this.stopTurn(proc, stop.reason ?? 'cancelled', state, lines, pending);
        return;
      }
      if (next.done) break;
      for (const event of this.sampled(this.safeMap(next.value, state), state)) {
        if (isTerminal(event)) {
          terminal = event; // anything after the first terminal event is dropped
          break;
        }
        yield this.track(event, state);
        if (event.type !== 'permission-request') continue;
        const { type: _type, ...request } = event;
        if (!input.gate) {
          this.unanswered.set(request.id, { request, state });
          continue;
        }
        const open = this.callOpenAtRequest(state) && state.attemptId !== undefined ? { attemptId: state.attemptId, turn: state.turn, call: state.usageEvents + 1 } : undefined;
        if (open) await this.saveOpenCalls([...this.openCalls, open]).catch(() => undefined);
        const decided = await this.decidePermission(request, input.gate, proc, stop);
        // The call is this process's to report again (after the answer, or as unknown when the turn is stopped).
        if (open) await this.saveOpenCalls(this.openCalls.filter((c) => c !== open)).catch(() => undefined);
        if (decided === undefined) {
          // Stopped while waiting: the tool never got an answer, so it never ran.
          yield* this.stopTurn(proc, stop.reason ?? 'cancelled', state, lines, lines.next());
          return;
        }
        if (decided === 'exited') continue; // the process died while waiting; its exit is reported below
        yield this.deliver(request, decided, state);
      }
    }
    if (terminal) {
      // The two-way modes are servers: closing stdin is how they are told to save and exit.
      if (command.keepStdinOpen) proc.closeStdin?.();
      // Let the harness finish saving its session before the process is killed in `finally`.
      await Promise.race([proc.exit, stop.promise, delay(this.exitGraceMs)]);
      yield* this.summary(state);
      yield terminal;
      return;
    }
    // The output is over. A process that exits now explains itself by its exit; one that lives on with its stdout
    // closed can say nothing more, so after a short grace the turn ends instead of waiting for its timeout.
    const closed = delay(this.outputClosedGraceMs).then(() => ({ closed: true }) as const);
    const exit = await Promise.race([proc.exit, stopWins, closed]);
    if (stop.reason || stopped in exit) {
      yield* this.stopTurn(proc, stop.reason ?? 'cancelled', state, lines, lines.next());
      return;
    }
    const terminalEvent = 'closed' in exit ? await this.outputClosed(proc, state) : this.exitWithoutTerminal(command, exit.code, exit.signal, proc.stderrTail(), state);
    for (const event of this.safeUnreported(state)) yield this.track(event, state);
    yield* this.summary(state);
    yield terminalEvent;
  }

  /** The turn's end for a process that closed its stdout without a terminal line and did not exit: killed. */
  private async outputClosed(proc: ExecProcess, state: LineState): Promise<TerminalEvent> {
    await proc.kill();
    const harness = this.config?.harnessName ?? this.driverClass;
    return sessionError(
      'protocol-error',
      `Harness "${harness}" closed its stdout without finishing the turn and was still running ${this.outputClosedGraceMs} ms later; it was killed. ` +
        `A harness prints its terminal line before it closes stdout${this.oversizedNote(state)}.`,
      { stderrTail: proc.stderrTail() },
    );
  }

  /** For an error message: the largest line that was too large to read, if any. */
  private oversizedNote(state: LineState): string {
    const largest = state.output.largest;
    if (!largest) return '';
    const more = state.output.tooLargeLines > 1 ? ` (and ${state.output.tooLargeLines - 1} more)` : '';
    return `; it printed a line of ${largest.bytes} bytes${more}, over the limit of ${largest.limit} bytes, which was not read (see docs/harnesses.md, "Output limits")`;
  }

  /**
   * Unknown and oversized lines are reported as events up to `sampledLinesPerTurn` each, then only counted: a
   * harness that prints a million lines the runtime cannot read costs a counter, not a million events.
   */
  private *sampled(events: HarnessEvent[], state: LineState): Iterable<HarnessEvent> {
    const output = state.output;
    for (const event of events) {
      if (event.type === 'unknown') {
        output.unknownLines += 1;
        if (output.unknownReported >= sampledLinesPerTurn) continue;
        output.unknownReported += 1;
        yield event.raw.length > unknownRawChars ? { type: 'unknown', raw: `${event.raw.slice(0, unknownRawChars)}…` } : event;
      } else if (event.type === 'line-too-large') {
        output.tooLargeLines += 1;
        if (!output.largest || event.bytes > output.largest.bytes) output.largest = new OversizedLine(event.bytes, event.limit, '');
        if (output.tooLargeReported >= sampledLinesPerTurn) continue;
        output.tooLargeReported += 1;
        yield event;
      } else yield event;
    }
  }

  /** The counts of lines the turn did not report one by one, once, before its terminal event. */
  private *summary(state: LineState): Iterable<HarnessEvent> {
    const o = state.output;
    if (o.unknownLines === o.unknownReported && o.tooLargeLines === o.tooLargeReported) return;
    yield { type: 'output-sampled', unknownLines: o.unknownLines, unknownReported: o.unknownReported, tooLargeLines: o.tooLargeLines, tooLargeReported: o.tooLargeReported };
  }

  /** Waits for the gate with the turn clock paused; `undefined` when the turn was stopped meanwhile. */
  private async decidePermission(
    request: PermissionRequest,
    gate: NonNullable<TurnInput['gate']>,
    proc: ExecProcess,
    stop: TurnStop,
  ): Promise<PermissionAnswer | 'exited' | undefined> {
    const waiting = new AbortController();
    stop.pause();
    try {
      const outcome = await Promise.race([
        gate.decide(request, waiting.signal).then((answer) => ({ answer })),
        stop.promise.then(() => 'stopped' as const),
        proc.exit.then(() => 'exited' as const),
      ]);
      if (outcome === 'stopped' || stop.reason) return undefined;
      if (outcome === 'exited') return 'exited';
      return outcome.answer;
    } catch {
      return stop.reason ? undefined : { decision: 'deny', scope: 'once', decidedBy: 'error', message: 'The permission check failed; denied.' };
    } finally {
      waiting.abort(new Error('permission wait over'));
      stop.resume();
    }
  }

  /** Writes the answer in the CLI's protocol; what it cannot carry becomes a note for a follow-up prompt. */
  private deliver(request: PermissionRequest, answer: PermissionAnswer, state: LineState): HarnessEvent {
    const edited = answer.decision === 'allow' && answer.editedInput !== undefined;
    let wire: WireAnswer;
    if (edited && request.options.edit !== 'native') {
      // Emulated edit: the original never runs; the model is told the edit, and exactly that input is pre-approved.
      const note = `The operator changed your ${request.tool} request "${request.title}". Ask again with exactly this input: ${JSON.stringify(answer.editedInput)}`;
      wire = { allow: false, message: note, scope: 'once' };
      state.notes.push(note);
    } else if (answer.decision === 'deny') {
      const message = answer.message ?? `Denied (${answer.decidedBy}).`;
      wire = { allow: false, message, scope: answer.scope };
      if (!request.options.denyMessage) state.notes.push(`Your ${request.tool} request "${request.title}" was denied: ${message}`);
    } else {
      wire = { allow: true, scope: answer.scope, ...(edited ? { editedInput: answer.editedInput } : {}) };
    }
    this.answerPermission(request, wire, state);
    return {
      type: 'permission-decision',
      id: request.id,
      tool: request.tool,
      decision: answer.decision,
      decidedBy: answer.decidedBy,
      ...(answer.approvalId !== undefined ? { approvalId: answer.approvalId } : {}),
      edited,
      ...(answer.message !== undefined ? { message: answer.message } : {}),
    };
  }

  /**
   * Ends a stopped turn: kills the process, then reads what it wrote before it died (`pending` is the next line,
   * perhaps already read), for a bounded time. Tokens the harness reported are spent whether or not the turn went
   * on, so its usage (and its session id) still counts; nothing else it said is acted on. Then the one terminal event.
   */
  private async *stopTurn(proc: ExecProcess, reason: StopReason, state: LineState, lines: AsyncIterator<OutputLine>, pending: Promise<IteratorResult<OutputLine>>): AsyncGenerator<HarnessEvent> {
    const terminal = await this.stopped(proc, reason);
    const deadline = Date.now() + stopDrainMs;
    // The timer bounds a wait for output; the clock bounds a backlog of lines that never waits (a flooding harness).
    const timeUp = new Latch<undefined>();
    const timer = setTimeout(() => timeUp.fire(undefined), stopDrainMs).unref();
    const pace = new Pacer();
    for (let next = await timeUp.race(pending); next && !next.done && Date.now() < deadline; next = await timeUp.race(lines.next())) {
      await pace.tick();
      // Junk read here is counted like the rest (sampled), but only usage and session are acted on.
      for (const event of this.sampled(this.safeMap(next.value, state), state)) {
        if (event.type === 'usage' || event.type === 'session') {
          const tracked = this.track(event, state);
          if (tracked.type === 'usage') yield tracked;
        }
      }
    }
    clearTimeout(timer);
    for (const event of this.safeUnreported(state)) yield this.track(event, state);
    yield* this.summary(state);
    yield terminal;
  }

  private async stopped(proc: ExecProcess, reason: StopReason): Promise<TerminalEvent> {
    await proc.kill(reason === 'spent' ? { graceMs: 0 } : undefined);
    const message =
      reason === 'timeout'
        ? `The turn exceeded its timeout of ${this.config?.turnTimeoutMs ?? 0} ms; the harness process was killed.`
        : reason === 'spent'
          ? "The turn's budget is spent; the harness process was killed at once."
          : 'The turn was cancelled; the harness process was killed.';
    return sessionError(reason === 'spent' ? 'cancelled' : reason, message, { stderrTail: proc.stderrTail() });
  }

  private exitWithoutTerminal(command: TurnCommand, code: number | null, signal: string | null, stderrTail: string, state: LineState): TerminalEvent {
    if (state.resumeSessionId !== undefined && this.unknownSessionPattern?.test(stderrTail)) {
      return this.resumeFailed(state, { exitCode: code, stderrTail });
    }
    const custom = this.onExit(code, stderrTail, state);
    if (custom) return custom;
    const harness = this.config?.harnessName ?? this.driverClass;
    const missing = missingExecutable(stderrTail, code);
    if (missing) {
      const executable = command.argv[0] ?? '(none)';
      return sessionError(
        'process-exit',
        `Harness "${harness}" could not start: executable "${executable}" was not found (${missing}). ` +
          `Install it on the worker (or in the sandbox image), or set "executable" for harness "${harness}" in the catalog to its full path.`,
        { exitCode: code, stderrTail },
      );
    }
    const how = signal ? `was killed by ${signal}` : `exited with code ${code ?? 'unknown'}`;
    const tail = stderrTail.trim() ? `; stderr ends with: ${lastLines(stderrTail, 3)}` : '; it printed nothing on stderr';
    return sessionError('process-exit', `Harness "${harness}" ${how} before finishing the turn${this.oversizedNote(state)}${tail}`, { exitCode: code, stderrTail });
  }

  /** The `unreportedUsage` hook's events (usage only); a hook that throws adds nothing. */
  private safeUnreported(state: LineState): HarnessEvent[] {
    try {
      return this.unreportedUsage(state).filter((e) => e.type === 'usage');
    } catch {
      return [];
    }
  }

  /** Never throws: a line the mapper cannot handle becomes an `unknown` event; an oversized one `mapOversizedLine`'s. */
  private safeMap(rawLine: OutputLine, state: LineState): HarnessEvent[] {
    if (rawLine instanceof OversizedLine) {
      try {
        return this.mapOversizedLine(rawLine, state);
      } catch {
        return [{ type: 'line-too-large', bytes: rawLine.bytes, limit: rawLine.limit, opening: rawLine.opening }];
      }
    }
    const line = rawLine.endsWith('\r') ? rawLine.slice(0, -1) : rawLine;
    if (line.trim() === '') return [];
    try {
      const mapped = this.mapLine(line, state);
      if (mapped === undefined) return [];
      return Array.isArray(mapped) ? mapped : [mapped];
    } catch {
      return [{ type: 'unknown', raw: line }];
    }
  }

  /** The run's open calls, kept in its state (durable before the wait they are for). */
  private async saveOpenCalls(calls: OpenCall[]): Promise<void> {
    this.openCalls = calls;
    await this.config?.state?.set(openCallsKey, calls);
  }

  /** Records session identity from `session` events; infers `resumed` when the harness does not say. */
  private track(event: HarnessEvent, state: LineState): HarnessEvent {
    if (event.type === 'usage' && !event.recovered) state.usageEvents += 1;
    if (event.type !== 'session') return event;
    // A fork reports the branch's new id: it continued the requested session all the same.
    const resumed = event.resumed ?? (state.resumeSessionId !== undefined && (state.fork || event.sessionId === state.resumeSessionId));
    this.sessionId = event.sessionId;
    this.lastResumed = resumed;
    if (event.model !== undefined) this.lastModel = event.model;
    return { ...event, resumed };
  }

  private watchStop(input: TurnInput, timeoutMs: number): TurnStop {
    let resolve!: (reason: StopReason) => void;
    const promise = new Promise<StopReason>((r) => {
      resolve = r;
    });
    let remaining = timeoutMs;
    let startedAt = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      startedAt = Date.now();
      timer = setTimeout(() => turnStop.stop('timeout'), remaining);
    };
    const latch = new Latch<{ readonly [stopped]: StopReason }>();
    const turnStop: TurnStop = {
      reason: undefined,
      promise,
      latch,
      stop: (reason) => {
        turnStop.reason ??= reason; // the first reason counts; it is read synchronously by `drive`
        resolve(turnStop.reason);
        latch.fire({ [stopped]: turnStop.reason });
      },
      pause: () => {
        if (timer === undefined) return;
        clearTimeout(timer);
        timer = undefined;
        remaining = Math.max(0, remaining - (Date.now() - startedAt));
      },
      resume: () => {
        if (timer === undefined && !turnStop.reason) arm();
      },
      dispose: () => {
        clearTimeout(timer);
        timer = undefined;
        input.signal?.removeEventListener('abort', onAbort);
      },
    };
    arm();
    const onAbort = (): void => turnStop.stop(input.signal?.reason instanceof StopAtOnce ? 'spent' : 'cancelled');
    input.signal?.addEventListener('abort', onAbort, { once: true });
    return turnStop;
  }
}

/** The open calls in the run's state, keeping only well-formed entries. */
function openCallsOf(value: unknown): OpenCall[] {
  if (!Array.isArray(value)) return [];
  return value.filter(
    (c): c is OpenCall => typeof c === 'object' && c !== null && typeof c.attemptId === 'string' && Number.isInteger(c.turn) && Number.isInteger(c.call) && c.call > 0,
  );
}

/**
 * A value that arrives once (a stop, a deadline). `race(p)` settles with `p` or the value, whichever comes first; unlike
 * `Promise.race` with a pending promise, it leaves nothing behind once `p` settled, so it can be raced a million times.
 */
class Latch<T> {
  private fired: { value: T } | undefined;
  private readonly waiters = new Set<(value: T) => void>();

  fire(value: T): void {
    if (this.fired) return;
    this.fired = { value };
    for (const waiter of [...this.waiters]) waiter(value);
    this.waiters.clear();
  }

  race<U>(pending: Promise<U>): Promise<U | T> {
    if (this.fired) return Promise.resolve(this.fired.value);
    return new Promise<U | T>((resolve, reject) => {
      const waiter = (value: T): void => resolve(value);
      this.waiters.add(waiter);
      pending.then(
        (value) => {
          this.waiters.delete(waiter);
          resolve(value);
        },
        (error: unknown) => {
          this.waiters.delete(waiter);
          reject(error);
        },
      );
    });
  }
}

/**
 * Gives the event loop a turn every `yieldEveryLines` lines or `yieldEveryMs`: lines that are already queued resolve as
 * microtasks, which would otherwise run back to back and starve timers and I/O. A turn whose lines come back to back
 * (more than one per millisecond: a flood) then waits as long as its batch took, so it gets at most half of the worker's
 * thread; the pipe fills meanwhile and the harness waits on its writes (backpressure). A normal harness never waits.
 */
class Pacer {
  private count = 0;
  private since = performance.now();
  async tick(): Promise<void> {
    this.count += 1;
    if (this.count < yieldEveryLines && (this.count & 31) !== 0) return;
    const elapsed = performance.now() - this.since;
    if (this.count < yieldEveryLines && elapsed < yieldEveryMs) return;
    const flooding = this.count >= 32 && elapsed < this.count;
    if (flooding) await new Promise<void>((resolve) => setTimeout(resolve, Math.min(Math.max(1, elapsed), maxFloodPauseMs)));
    else await new Promise<void>((resolve) => setImmediate(resolve));
    this.count = 0;
    this.since = performance.now();
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
