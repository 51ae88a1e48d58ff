/**
 * The ONE turn engine every driver runs on: one process per turn, one output line at a time.
 *
 * It owns everything that must be the same for every harness: starting the process through the sandbox's executor
 * (never spawning itself), line framing within the caps, the turn timeout (paused while a permission request waits:
 * the approval has its own timeout), cancellation and `StopAtOnce`, the drain after a kill (usage a killed harness
 * reported still counts), the closed-stdout watch, output sampling, fairness towards the rest of the worker, and
 * exactly one terminal event, last — carrying the session the turn ran in. A driver (driver.ts) supplies only how
 * the turn starts and how its lines (or its two-way conversation) become events.
 */
import type { PermissionAnswer, PermissionGate, PermissionRequest } from '../permissions/types.js';
import { defaultLineLimits, OversizedLine, type OutputLine } from '../sandbox/line-queue.js';
import type { ExecProcess, SandboxExecutor, SandboxFs } from '../sandbox/types.js';
import type { DriverCommand, DriverTurn, HarnessDriver, LineMapper, Mapped, SessionIo, TwoWaySession, UsageAck, WireAnswer } from './driver.js';
import { sessionError } from './kit.js';
import type { HomeTemplates } from './home-template.js';
import type { HarnessEvent, HarnessStateStore, PermissionPosture, TerminalEvent, TurnSession } from './types.js';
import { StopAtOnce } from './types.js';

/** What the caller knows of a turn; the engine decides `fork` and `twoWay`. */
export type TurnRequest = Omit<DriverTurn, 'fork' | 'twoWay' | 'state' | 'settings' | 'posture'> & {
  readonly settings?: Readonly<Record<string, unknown>>;
  readonly state?: HarnessStateStore;
  readonly posture?: PermissionPosture;
};

/** Where and how the turn runs. */
export interface EngineOptions {
  readonly executor: SandboxExecutor;
  /** The workspace's files: the driver's home is written and read through it. */
  readonly fs: SandboxFs;
  /**
   * Decides the harness's permission requests (policy, then a human). An interactive gate selects the driver's
   * two-way mode. Without one a request is denied: nobody could answer it.
   */
  readonly gate?: PermissionGate;
  /** Aborting stops the turn: the process gets SIGTERM and the kill grace; with a `StopAtOnce` reason, SIGKILL at once. */
  readonly signal?: AbortSignal;
  /** Prepared homes: a new home of a driver that has a template starts from it (only where the worker runs the harness's CLI). */
  readonly homeTemplates?: HomeTemplates;
  /** How long a process may keep running after its terminal line before it is killed. */
  readonly exitGraceMs?: number;
  /** How long a process that closed its stdout without a terminal line may live on before the turn ends. */
  readonly outputClosedGraceMs?: number;
}

/** One running turn: its events (exactly one terminal event, last), and the usage acknowledgement channel. */
export interface DriverRun extends AsyncIterable<HarnessEvent> {
  /** Tells the harness a usage event is durable in the ledger (stdio-JSON `usage-ack`); a no-op for others. */
  acknowledge(ack: UsageAck): void;
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

/** At most this many follow-up prompts per turn, so a model that keeps asking for denied tools cannot loop. */
const maxFollowUps = 3;

const defaultExitGraceMs = 3000;

/** How long a stopped turn's output is still read, once its process was killed, for the usage it reported. */
const stopDrainMs = 1000;

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

/** Why and when the current turn must stop (timeout or abort). */
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

/** Unknown and oversized lines of the turn, and how many of each were reported as events (a sample). */
interface OutputCounts {
  unknownLines: number;
  unknownReported: number;
  tooLargeLines: number;
  tooLargeReported: number;
  largest: OversizedLine | undefined;
}

/** The engine's state of one turn. */
interface Turn {
  readonly driver: HarnessDriver;
  readonly turn: DriverTurn;
  readonly options: EngineOptions;
  readonly command: DriverCommand;
  readonly proc: ExecProcess;
  readonly stop: TurnStop;
  readonly output: OutputCounts;
  /** Permission outcomes the CLI's protocol could not show the model; `followUp` turns them into a prompt. */
  readonly notes: string[];
  followUps: number;
  /** Usage events of this turn so far (recovered ones aside): the next one is the attempt's call `usageEvents + 1`. */
  usageEvents: number;
  /** The session as the harness reported it. */
  session: TurnSession | undefined;
  openCalls: OpenCall[];
}

function isTerminal(event: HarnessEvent): event is TerminalEvent {
  return event.type === 'turn-complete' || event.type === 'session-error';
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

/** Whether resumed turns fork: `settings.forkSessions` when the catalog says, else the driver's `sessionFork`. */
function forks(driver: HarnessDriver, settings: Readonly<Record<string, unknown>>): boolean {
  const setting = settings.forkSessions;
  return typeof setting === 'boolean' ? setting : driver.capabilities.sessionFork === true;
}

/** A state store for one turn, when the caller keeps none. */
function memoryState(): HarnessStateStore {
  const values = new Map<string, unknown>();
  return { get: async (key) => values.get(key), set: async (key, value) => void values.set(key, value) };
}

/** The turn as its driver sees it. */
export function driverTurn(driver: HarnessDriver, request: TurnRequest, gate?: PermissionGate): DriverTurn {
  const settings = request.settings ?? {};
  const fork = request.resumeSessionId !== undefined && forks(driver, settings);
  const twoWay = gate?.interactive === true && driver.capabilities.permissionHooks;
  return { ...request, settings, posture: request.posture ?? 'auto', state: request.state ?? memoryState(), fork, twoWay };
}

/** Runs one turn of `driver`; see the file comment. Iterate it once. */
export function runDriverTurn(driver: HarnessDriver, request: TurnRequest, options: EngineOptions): DriverRun {
  let acknowledge: (ack: UsageAck) => void = () => undefined;
  const events = turnEvents(driver, driverTurn(driver, request, options.gate), options, (ack) => {
    acknowledge = ack;
  });
  return {
    [Symbol.asyncIterator]: () => events,
    acknowledge: (ack) => acknowledge(ack),
  };
}

async function* turnEvents(driver: HarnessDriver, turn: DriverTurn, options: EngineOptions, onAck: (ack: (a: UsageAck) => void) => void): AsyncGenerator<HarnessEvent> {
  if (options.signal?.aborted) {
    yield sessionError('cancelled', 'The turn was cancelled before it started.');
    return;
  }
  let proc: ExecProcess;
  let command: DriverCommand;
  let openCalls: OpenCall[];
  try {
    openCalls = openCallsOf(await turn.state.get(openCallsKey));
    if (driver.homeTemplate && options.homeTemplates) await options.homeTemplates.seed(driver.homeTemplate, turn, options.fs);
    await driver.prepare?.(options.fs, turn);
    command = driver.command(turn);
    proc = options.executor.exec({
      argv: command.argv,
      cwd: turn.workspacePath,
      env: { ...turn.env, ...command.env },
      stdin: command.stdin,
      keepStdinOpen: command.keepStdinOpen,
      lineLimits: command.lineLimits ?? { maxLineBytes: longLineBytes(turn), maxLongLineBytes: longLineBytes(turn) },
    });
  } catch (error) {
    yield sessionError('protocol-error', `${driver.driverClass} could not start the turn: ${(error as Error).message}`);
    return;
  }
  const stop = watchStop(options.signal, command.timeoutMs !== undefined ? Math.min(command.timeoutMs, turn.timeoutMs) : turn.timeoutMs);
  const t: Turn = {
    driver,
    turn,
    options,
    command,
    proc,
    stop,
    output: { unknownLines: 0, unknownReported: 0, tooLargeLines: 0, tooLargeReported: 0, largest: undefined },
    notes: [],
    followUps: 0,
    usageEvents: 0,
    session: undefined,
    openCalls,
  };
  const reReported: OpenCall[] = [];
  try {
    // Calls an earlier attempt left open when its process died in a permission wait: spent, count unknown.
    for (const open of openCalls.filter((c) => c.attemptId !== turn.attemptId)) {
      reReported.push(open);
      yield { type: 'usage', usage: {}, recovered: open };
    }
    const session = driver.session(turn);
    if (session.kind === 'two-way') {
      yield* twoWayTurn(t, session);
    } else {
      const mapper = await session.start(turn, { send: (line) => proc.write(`${line}\n`), fs: options.fs, followUp: () => takeFollowUp(t) });
      onAck((ack) => {
        const line = mapper.usageAck?.(ack);
        if (line !== undefined) proc.write(`${line}\n`);
      });
      yield* oneWayTurn(t, mapper);
    }
  } finally {
    stop.dispose();
    await proc.kill();
    // Re-reported open calls are booked (or queued) by now; a later turn would only book them again, idempotently.
    if (reReported.length > 0) await saveOpenCalls(t, t.openCalls.filter((c) => !reReported.includes(c))).catch(() => undefined);
  }
}

/** The longest terminal line: twice the reply cap (a reply's JSON escapes make its line longer than it). */
export function longLineBytes(turn: Pick<DriverTurn, 'maxReplyBytes'>): number {
  return Math.max(defaultLineLimits.maxLineBytes, 2 * (turn.maxReplyBytes ?? defaultLineLimits.maxLongLineBytes / 2));
}

/** Reads lines until a terminal event, the end of output, or a stop; then yields the one terminal event. */
async function* oneWayTurn(t: Turn, mapper: LineMapper): AsyncGenerator<HarnessEvent> {
  const { proc, stop } = t;
  const lines = (proc.output ?? proc.lines)[Symbol.asyncIterator]();
  const stopWins = stop.promise.then((reason) => ({ [stopped]: reason }) as const);
  const pace = new Pacer();
  const unreported = async () => usageOnly(await safeUnreported(mapper));
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
      yield* stopTurn(t, stop.reason ?? 'cancelled', lines, pending, (line) => safeMap(mapper, line), unreported);
      return;
    }
    if (next.done) break;
    const mapped = safeMap(mapper, next.value);
    for (const event of sampled(Array.isArray(mapped) ? mapped : await mapped, t.output)) {
      if (isTerminal(event)) {
        terminal = event; // anything after the first terminal event is dropped
        break;
      }
      yield track(event, t);
      if (event.type !== 'permission-request') continue;
      const { type: _type, ...request } = event;
      const open = mapper.callOpen?.() === true ? openCall(t) : undefined;
      const decided = await waitForGate(t, request, open);
      if (decided === undefined) {
        // Stopped while waiting: the tool never got an answer, so it never ran.
        yield* stopTurn(t, stop.reason ?? 'cancelled', lines, lines.next(), (line) => safeMap(mapper, line), unreported);
        return;
      }
      if (decided === 'exited') continue; // the process died while waiting; its exit is reported below
      const { wire, event: decision } = deliver(t, request, decided);
      mapper.answer?.(request, wire);
      yield decision;
    }
  }
  if (terminal) {
    yield* finishTurn(t, terminal);
    return;
  }
  // The output is over. A process that exits now explains itself by its exit; one that lives on with its stdout
  // closed can say nothing more, so after a short grace the turn ends instead of waiting for its timeout.
  const graceMs = t.options.outputClosedGraceMs ?? defaultOutputClosedGraceMs;
  const closed = delay(graceMs).then(() => ({ closed: true }) as const);
  const exit = await Promise.race([proc.exit, stopWins, closed]);
  if (stop.reason || stopped in exit) {
    yield* stopTurn(t, stop.reason ?? 'cancelled', lines, lines.next(), (line) => safeMap(mapper, line), unreported);
    return;
  }
  const terminalEvent = 'closed' in exit ? await outputClosed(t, graceMs) : exitWithoutTerminal(t, exit.code, exit.signal, proc.stderrTail(), mapper.exit?.bind(mapper));
  for (const event of await unreported()) yield track(event, t);
  yield* summary(t.output);
  yield withSession(terminalEvent, t);
}

/** A terminal event arrived: let the harness finish saving its session, then the one terminal event. */
async function* finishTurn(t: Turn, terminal: TerminalEvent): AsyncGenerator<HarnessEvent> {
  // The two-way modes are servers: closing stdin is how they are told to save and exit.
  if (t.command.keepStdinOpen) t.proc.closeStdin?.();
  await Promise.race([t.proc.exit, t.stop.promise, delay(t.options.exitGraceMs ?? defaultExitGraceMs)]);
  yield* summary(t.output);
  yield withSession(terminal, t);
}

/**
 * A two-way turn: the session's conversation runs against `io`; its events come out here in order. Stopping aborts
 * `io.signal`, kills the process and drains its output for a bounded time (usage and session only), then ends.
 */
async function* twoWayTurn(t: Turn, session: TwoWaySession): AsyncGenerator<HarnessEvent> {
  const { proc, stop } = t;
  const queue = new EventQueue();
  const abort = new AbortController();
  const output = (proc.output ?? proc.lines)[Symbol.asyncIterator]();
  const pace = new Pacer();
  let draining = false;
  async function* lines(): AsyncGenerator<string> {
    for (;;) {
      await pace.tick();
      const next = await (draining ? output.next() : stop.latch.race(output.next()));
      if (stopped in next || next.done) return;
      if (next.value instanceof OversizedLine) {
        for (const event of sampled([{ type: 'line-too-large', bytes: next.value.bytes, limit: next.value.limit, opening: next.value.opening }], t.output)) queue.push(event);
        continue;
      }
      const line = next.value.endsWith('\r') ? next.value.slice(0, -1) : next.value;
      if (line.trim() !== '') yield line;
    }
  }
  const io: SessionIo = {
    lines: lines(),
    // Nothing reaches a stopped turn's process: an answer written now could let a tool run while it is killed.
    send: (line) => {
      if (!draining) proc.write(`${line}\n`);
    },
    emit: (event) => {
      if (isTerminal(event) || event.type === 'permission-request') return;
      if (draining && event.type !== 'usage' && event.type !== 'session') return;
      for (const e of sampled([event], t.output)) queue.push(e);
    },
    gate: async (request, options) => {
      const denied: WireAnswer = { allow: false, message: 'The turn ended before a decision.', scope: 'once' };
      if (draining) return denied;
      queue.push({ type: 'permission-request', ...request });
      const decided = await waitForGate(t, request, options?.callOpen === true ? openCall(t) : undefined);
      if (decided === undefined || decided === 'exited') return denied;
      const { wire, event } = deliver(t, request, decided);
      queue.push(event);
      return wire;
    },
    followUp: () => takeFollowUp(t),
    fs: t.options.fs,
    signal: abort.signal,
  };
  const onStop = (): void => {
    draining = true;
    abort.abort(new Error('turn stopped'));
  };
  void stop.promise.then(onStop);
  const ran = session.run(t.turn, io).then(
    (terminal) => queue.end(terminal),
    (error: unknown) => queue.end(sessionError('protocol-error', `${t.driver.driverClass}: the session failed: ${(error as Error).message}`)),
  );
  let terminal: TerminalEvent | undefined;
  // The read in flight when a stop wins is kept: the event it takes belongs to the drain, not to nobody.
  let pending = queue.next();
  for (;;) {
    const next = await stop.latch.race(pending);
    if (stopped in next || stop.reason) break;
    if (next.done) {
      terminal = next.value;
      break;
    }
    yield track(next.value, t);
    pending = queue.next();
  }
  if (stop.reason) {
    const end = await killed(t, stop.reason);
    // The session reads what the killed process still wrote (bounded), and books what it knows was spent.
    const timeUp = delay(stopDrainMs).then(() => undefined);
    for (let next = await Promise.race([pending, timeUp]); next && !next.done; next = await Promise.race([queue.next(), timeUp])) {
      const event = next.value;
      if (event.type === 'usage' || event.type === 'session') {
        const tracked = track(event, t);
        if (tracked.type === 'usage') yield tracked;
      }
    }
    void ran;
    yield* summary(t.output);
    yield withSession(end, t);
    return;
  }
  if (terminal) {
    yield* finishTurn(t, terminal);
    return;
  }
  const graceMs = t.options.outputClosedGraceMs ?? defaultOutputClosedGraceMs;
  const closed = delay(graceMs).then(() => ({ closed: true }) as const);
  const exit = await Promise.race([proc.exit, closed]);
  const terminalEvent =
    'closed' in exit ? await outputClosed(t, graceMs) : exitWithoutTerminal(t, exit.code, exit.signal, proc.stderrTail(), session.exit ? (code, tail) => session.exit!(t.turn, code, tail) : undefined);
  yield* summary(t.output);
  yield withSession(terminalEvent, t);
}

/** The open call a permission wait holds, when the attempt has an id. */
function openCall(t: Turn): OpenCall | undefined {
  return t.turn.attemptId !== undefined ? { attemptId: t.turn.attemptId, turn: t.turn.turn, call: t.usageEvents + 1 } : undefined;
}

/** Records the open call for the wait, waits for the gate, and clears it: the call is this process's to report again. */
async function waitForGate(t: Turn, request: PermissionRequest, open: OpenCall | undefined): Promise<PermissionAnswer | 'exited' | undefined> {
  if (open) await saveOpenCalls(t, [...t.openCalls, open]).catch(() => undefined);
  const decided = await decidePermission(t, request);
  if (open) await saveOpenCalls(t, t.openCalls.filter((c) => c !== open)).catch(() => undefined);
  return decided;
}

/** Waits for the gate with the turn clock paused; `undefined` when the turn was stopped meanwhile. */
async function decidePermission(t: Turn, request: PermissionRequest): Promise<PermissionAnswer | 'exited' | undefined> {
  const { stop, proc } = t;
  const gate = t.options.gate;
  if (!gate) return { decision: 'deny', scope: 'once', decidedBy: 'no-gate', message: 'No permission gate was given for this turn; denied.' };
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

/** The answer in the CLI's terms; what it cannot carry becomes a note for a follow-up prompt. */
function deliver(t: Turn, request: PermissionRequest, answer: PermissionAnswer): { wire: WireAnswer; event: HarnessEvent } {
  const edited = answer.decision === 'allow' && answer.editedInput !== undefined;
  let wire: WireAnswer;
  if (edited && request.options.edit !== 'native') {
    // Emulated edit: the original never runs; the model is told the edit, and exactly that input is pre-approved.
    const note = `The operator changed your ${request.tool} request "${request.title}". Ask again with exactly this input: ${JSON.stringify(answer.editedInput)}`;
    wire = { allow: false, message: note, scope: 'once' };
    t.notes.push(note);
  } else if (answer.decision === 'deny') {
    const message = answer.message ?? `Denied (${answer.decidedBy}).`;
    wire = { allow: false, message, scope: answer.scope };
    if (!request.options.denyMessage) t.notes.push(`Your ${request.tool} request "${request.title}" was denied: ${message}`);
  } else {
    wire = { allow: true, scope: answer.scope, ...(edited ? { editedInput: answer.editedInput } : {}) };
  }
  const event: HarnessEvent = {
    type: 'permission-decision',
    id: request.id,
    tool: request.tool,
    decision: answer.decision,
    decidedBy: answer.decidedBy,
    ...(answer.approvalId !== undefined ? { approvalId: answer.approvalId } : {}),
    edited,
    ...(answer.message !== undefined ? { message: answer.message } : {}),
  };
  return { wire, event };
}

/** The follow-up prompt for the notes so far (consumed), or `undefined` when there are none or the turn had its share. */
function takeFollowUp(t: Turn): string | undefined {
  if (t.notes.length === 0 || t.followUps >= maxFollowUps) return undefined;
  const notes = t.notes.splice(0);
  t.followUps += 1;
  return [
    'Permission decisions on your last tool requests (durable-harness):',
    ...notes.map((n) => `- ${n}`),
    'Continue the task with this in mind, and end with your JSON envelope as before.',
  ].join('\n');
}

/**
 * Ends a stopped turn: kills the process, then reads what it wrote before it died (`pending` is the next line,
 * perhaps already read), for a bounded time. Tokens the harness reported are spent whether or not the turn went
 * on, so its usage (and its session id) still counts; nothing else it said is acted on. Then the one terminal event.
 */
async function* stopTurn(
  t: Turn,
  reason: StopReason,
  lines: AsyncIterator<OutputLine>,
  pending: Promise<IteratorResult<OutputLine>>,
  map: (line: OutputLine) => HarnessEvent[] | Promise<HarnessEvent[]>,
  unreported: () => Promise<HarnessEvent[]>,
): AsyncGenerator<HarnessEvent> {
  const terminal = await killed(t, reason);
  const deadline = Date.now() + stopDrainMs;
  // The timer bounds a wait for output; the clock bounds a backlog of lines that never waits (a flooding harness).
  const timeUp = new Latch<undefined>();
  const timer = setTimeout(() => timeUp.fire(undefined), stopDrainMs).unref();
  const pace = new Pacer();
  for (let next = await timeUp.race(pending); next && !next.done && Date.now() < deadline; next = await timeUp.race(lines.next())) {
    await pace.tick();
    // Junk read here is counted like the rest (sampled), but only usage and session are acted on.
    for (const event of sampled(await map(next.value), t.output)) {
      if (event.type === 'usage' || event.type === 'session') {
        const tracked = track(event, t);
        if (tracked.type === 'usage') yield tracked;
      }
    }
  }
  clearTimeout(timer);
  for (const event of await unreported()) yield track(event, t);
  yield* summary(t.output);
  yield withSession(terminal, t);
}

async function killed(t: Turn, reason: StopReason): Promise<TerminalEvent> {
  await t.proc.kill(reason === 'spent' ? { graceMs: 0 } : undefined);
  const message =
    reason === 'timeout'
      ? `The turn exceeded its timeout of ${t.command.timeoutMs !== undefined ? Math.min(t.command.timeoutMs, t.turn.timeoutMs) : t.turn.timeoutMs} ms; the harness process was killed.`
      : reason === 'spent'
        ? "The turn's budget is spent; the harness process was killed at once."
        : 'The turn was cancelled; the harness process was killed.';
  return sessionError(reason === 'spent' ? 'cancelled' : reason, message, { stderrTail: t.proc.stderrTail() });
}

/** The turn's end for a process that closed its stdout without a terminal line and did not exit: killed. */
async function outputClosed(t: Turn, graceMs: number): Promise<TerminalEvent> {
  await t.proc.kill();
  return sessionError(
    'protocol-error',
    `Harness "${t.turn.harnessName}" closed its stdout without finishing the turn and was still running ${graceMs} ms later; it was killed. ` +
      `A harness prints its terminal line before it closes stdout${oversizedNote(t.output)}.`,
    { stderrTail: t.proc.stderrTail() },
  );
}

function exitWithoutTerminal(
  t: Turn,
  code: number | null,
  signal: string | null,
  stderrTail: string,
  custom: ((code: number | null, stderrTail: string) => TerminalEvent | undefined) | undefined,
): TerminalEvent {
  let own: TerminalEvent | undefined;
  try {
    own = custom?.(code, stderrTail);
  } catch {
    own = undefined;
  }
  if (own) return own;
  const harness = t.turn.harnessName;
  const missing = missingExecutable(stderrTail, code);
  if (missing) {
    const executable = t.command.argv[0] ?? '(none)';
    return sessionError(
      'process-exit',
      `Harness "${harness}" could not start: executable "${executable}" was not found (${missing}). ` +
        `Install it on the worker (or in the sandbox image), or set "executable" for harness "${harness}" in the catalog to its full path.`,
      { exitCode: code, stderrTail },
    );
  }
  const how = signal ? `was killed by ${signal}` : `exited with code ${code ?? 'unknown'}`;
  const tail = stderrTail.trim() ? `; stderr ends with: ${lastLines(stderrTail, 3)}` : '; it printed nothing on stderr';
  return sessionError('process-exit', `Harness "${harness}" ${how} before finishing the turn${oversizedNote(t.output)}${tail}`, { exitCode: code, stderrTail });
}

/** For an error message: the largest line that was too large to read, if any. */
function oversizedNote(output: OutputCounts): string {
  const largest = output.largest;
  if (!largest) return '';
  const more = output.tooLargeLines > 1 ? ` (and ${output.tooLargeLines - 1} more)` : '';
  return `; it printed a line of ${largest.bytes} bytes${more}, over the limit of ${largest.limit} bytes, which was not read (see docs/harnesses.md, "Output limits")`;
}

/**
 * Unknown and oversized lines are reported as events up to `sampledLinesPerTurn` each, then only counted: a
 * harness that prints a million lines the runtime cannot read costs a counter, not a million events.
 */
function* sampled(events: readonly HarnessEvent[], output: OutputCounts): Iterable<HarnessEvent> {
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
function* summary(o: OutputCounts): Iterable<HarnessEvent> {
  if (o.unknownLines === o.unknownReported && o.tooLargeLines === o.tooLargeReported) return;
  yield { type: 'output-sampled', unknownLines: o.unknownLines, unknownReported: o.unknownReported, tooLargeLines: o.tooLargeLines, tooLargeReported: o.tooLargeReported };
}

/** The mapper's `unreported` events, usage only; a mapper that throws adds nothing. */
async function safeUnreported(mapper: LineMapper): Promise<readonly HarnessEvent[]> {
  try {
    return (await mapper.unreported?.()) ?? [];
  } catch {
    return [];
  }
}

function usageOnly(events: readonly HarnessEvent[]): HarnessEvent[] {
  return events.filter((e) => e.type === 'usage');
}

function asEvents(mapped: Mapped): HarnessEvent[] {
  if (mapped === undefined) return [];
  return Array.isArray(mapped) ? [...(mapped as readonly HarnessEvent[])] : [mapped as HarnessEvent];
}

/** Never throws: a line the mapper cannot handle becomes an `unknown` event; an oversized one the mapper's `oversized`. */
function safeMap(mapper: LineMapper, rawLine: OutputLine): HarnessEvent[] | Promise<HarnessEvent[]> {
  if (rawLine instanceof OversizedLine) {
    const fallback: HarnessEvent = { type: 'line-too-large', bytes: rawLine.bytes, limit: rawLine.limit, opening: rawLine.opening };
    try {
      return mapper.oversized ? [...mapper.oversized(rawLine)] : [fallback];
    } catch {
      return [fallback];
    }
  }
  const line = rawLine.endsWith('\r') ? rawLine.slice(0, -1) : rawLine;
  if (line.trim() === '') return [];
  try {
    const mapped = mapper.line(line);
    // Only a mapper that returned a promise is awaited: a flood of lines must not cost a microtask each.
    if (mapped instanceof Promise) return mapped.then(asEvents, () => [{ type: 'unknown', raw: line }]);
    return asEvents(mapped);
  } catch {
    return [{ type: 'unknown', raw: line }];
  }
}

/** The run's open calls, kept in its state (durable before the wait they are for). */
async function saveOpenCalls(t: Turn, calls: OpenCall[]): Promise<void> {
  t.openCalls = calls;
  await t.turn.state.set(openCallsKey, calls);
}

/** Records session identity from `session` events; infers `resumed` when the harness does not say. */
function track(event: HarnessEvent, t: Turn): HarnessEvent {
  if (event.type === 'usage' && !event.recovered) t.usageEvents += 1;
  if (event.type !== 'session') return event;
  const { resumeSessionId, fork } = t.turn;
  // A fork reports the branch's new id: it continued the requested session all the same.
  const resumed = event.resumed ?? (resumeSessionId !== undefined && (fork || event.sessionId === resumeSessionId));
  const model = event.model ?? (t.session?.sessionId === event.sessionId ? t.session.model : undefined);
  t.session = { sessionId: event.sessionId, resumed, ...(model !== undefined ? { model } : {}) };
  return { ...event, resumed };
}

function withSession(terminal: TerminalEvent, t: Turn): TerminalEvent {
  return t.session ? { ...terminal, session: t.session } : terminal;
}

function watchStop(signal: AbortSignal | undefined, timeoutMs: number): TurnStop {
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
      turnStop.reason ??= reason; // the first reason counts; it is read synchronously by the loops
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
      signal?.removeEventListener('abort', onAbort);
    },
  };
  arm();
  const onAbort = (): void => turnStop.stop(signal?.reason instanceof StopAtOnce ? 'spent' : 'cancelled');
  signal?.addEventListener('abort', onAbort, { once: true });
  return turnStop;
}

/** The open calls in the run's state, keeping only well-formed entries. */
function openCallsOf(value: unknown): OpenCall[] {
  if (!Array.isArray(value)) return [];
  return value.filter(
    (c): c is OpenCall => typeof c === 'object' && c !== null && typeof c.attemptId === 'string' && Number.isInteger(c.turn) && Number.isInteger(c.call) && c.call > 0,
  );
}

/** A two-way session's events in order, and its terminal event (or none) once it returned. */
class EventQueue {
  private readonly items: HarnessEvent[] = [];
  private ended: { value: TerminalEvent | undefined } | undefined;
  private wake: (() => void) | undefined;

  push(event: HarnessEvent): void {
    if (this.ended) return;
    this.items.push(event);
    this.wake?.();
  }

  end(terminal: TerminalEvent | undefined): void {
    this.ended ??= { value: terminal };
    this.wake?.();
  }

  async next(): Promise<IteratorResult<HarnessEvent, TerminalEvent | undefined>> {
    for (;;) {
      const item = this.items.shift();
      if (item) return { done: false, value: item };
      if (this.ended) return { done: true, value: this.ended.value };
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = undefined;
    }
  }
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
