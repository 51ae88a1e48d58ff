/**
 * The stdio-JSON adapter (driver class `StdioJson`): any harness that speaks the documented vocabulary
 * (docs/stdio-json.md) runs without adapter code. One process per turn; one request line on stdin, kept open
 * for permission answers; one JSON object per stdout line back.
 */
import type { z } from 'zod';
import type { DriverTurn, HarnessDriver, LineMapper, Mapped } from './driver.js';
import { longLineBytes } from './engine.js';
import { cliCapabilities, parseJsonLine } from './kit.js';
import {
  activityLine,
  completeLine,
  errorCodes,
  errorLine,
  otherLine,
  permissionLine,
  permissionResponse,
  sessionLine,
  textLine,
  turnRequest,
  usageAck,
  usageLine,
} from './stdio-json-protocol.js';
import type { OversizedLine } from '../sandbox/line-queue.js';
import { costOf, maxReportedCostUsd, noUsage, usageOf, usageProblem } from '../contracts/usage.js';
import type { Capabilities, HarnessEvent, SessionErrorCode } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const stdioJsonDriverClass = 'StdioJson';

/** What the protocol gives every harness; a catalog entry may override individual flags. */
export const stdioJsonCapabilities: Capabilities = cliCapabilities();


const commandTools = /^(bash|shell|sh|exec|run|command|terminal)/i;
const editTools = /^(write|edit|patch|create|delete|move|apply)/i;
const readTools = /^(read|cat|view|ls|list|glob|grep|find|search)/i;

function stringField(input: unknown, ...keys: string[]): string | undefined {
  if (input === null || typeof input !== 'object') return undefined;
  for (const key of keys) {
    const value = (input as Record<string, unknown>)[key];
    if (typeof value === 'string' && value.length > 0) return value;
  }
  return undefined;
}

/** A `permission` line as the runtime's request; what the harness leaves out is inferred from the tool and input. */
function permissionRequestOf(p: z.infer<typeof permissionLine>): HarnessEvent {
  const kind = p.kind ?? (commandTools.test(p.tool) ? 'command' : editTools.test(p.tool) ? 'edit' : readTools.test(p.tool) ? 'read' : 'other');
  const command = p.command ?? (kind === 'command' ? stringField(p.input, 'command', 'cmd') : undefined);
  const filePath = stringField(p.input, 'path', 'file_path', 'filePath');
  const paths = p.paths ?? (filePath !== undefined ? [filePath] : undefined);
  return {
    type: 'permission-request',
    id: p.id,
    tool: p.tool,
    kind,
    input: p.input ?? null,
    title: p.title ?? command ?? (filePath !== undefined ? `${p.tool} ${filePath}` : p.tool),
    ...(command !== undefined ? { command } : {}),
    ...(paths ? { paths } : {}),
    options: { edit: p.editable ? 'native' : 'emulated', denyMessage: true },
  };
}

function knownErrorCode(code: string | null | undefined): SessionErrorCode {
  return (errorCodes as readonly string[]).includes(code ?? '') ? (code as SessionErrorCode) : 'vendor-error';
}

/** The longest line other than a terminal one (docs/stdio-json.md). */
export const maxStdioJsonLineBytes = 1024 * 1024;

/** A line whose opening says it is terminal (`complete` or `error`, with `type` as its first field). */
const terminalOpening = /^\s*\{\s*"type"\s*:\s*"(complete|error)"/;
/** A line whose opening says it is a usage report. */
const usageOpening = /^\s*\{\s*"type"\s*:\s*"usage"/;

/** A line that means to be a usage report, whether or not it parses. */
const usageLike = /"type"\s*:\s*"usage"/;

/** A usage report whose counts cannot be read: said so (for the operator), and booked as a call of unknown usage. */
function refusedUsage(line: string, problem: string): [HarnessEvent, HarnessEvent] {
  const shown = line.length > 200 ? `${line.slice(0, 200)}…` : line;
  return [
    { type: 'activity', description: `usage line refused, counted as unknown usage (the cost is blind): ${problem}: ${shown}` },
    { type: 'usage', usage: noUsage },
  ];
}


/** A terminal (or usage) line with bad fields ends the turn, with an error that says what was wrong. */
function malformedTerminal(line: string, type: 'complete' | 'error' | 'usage', problem?: string): HarnessEvent {
  const shown = line.length > 200 ? `${line.slice(0, 200)}…` : line;
  const why = problem ? ` (${problem})` : '';
  return { type: 'session-error', code: 'protocol-error', message: `The harness printed a malformed "${type}" line${why} (see docs/stdio-json.md): ${shown}` };
}

/**
 * A terminal line too large to read ends the turn, saying so; a usage line too large to read is usage of unknown
 * size (tokens were spent); any other is reported as `line-too-large` and the turn goes on.
 */
function oversized(line: OversizedLine): HarnessEvent[] {
  const what = `a line of ${line.bytes} bytes, over the limit of ${line.limit} bytes`;
  const tooLarge: HarnessEvent = { type: 'line-too-large', bytes: line.bytes, limit: line.limit, opening: line.opening };
  const kind = terminalOpening.exec(line.opening)?.[1];
  if (kind !== undefined) {
    return [tooLarge, { type: 'session-error', code: 'protocol-error', message: `The harness printed a "${kind}" line of ${line.bytes} bytes, over the limit of ${line.limit} bytes (twice this harness's maxReplyBytes); it was not read (see docs/stdio-json.md).` }];
  }
  if (usageOpening.test(line.opening)) return [tooLarge, ...refusedUsage(line.opening, what)];
  return [tooLarge];
}

function mapSession(json: unknown, line: string): Mapped {
  const parsed = sessionLine.safeParse(json);
  if (!parsed.success) return { type: 'unknown', raw: line };
  const { id, resumed, model } = parsed.data;
  return { type: 'session', sessionId: id, resumed: resumed ?? undefined, model: model ?? undefined };
}

/** A usage line the runtime cannot read exactly ends the turn: tokens must never silently count as nothing. */
function mapUsage(json: unknown, line: string, attemptId: string | undefined): Mapped {
  const parsed = usageLine.safeParse(json);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => (i.code === 'unrecognized_keys' ? `unknown field(s) ${i.keys.join(', ')}` : `${i.path.join('.')}: ${i.message}`));
    return malformedTerminal(line, 'usage', problems.join('; '));
  }
  const u = parsed.data;
  const counts = { input: u.input, output: u.output, cacheRead: u.cacheRead, cacheWrite: u.cacheWrite, reasoning: u.reasoning };
  const problem = usageProblem(counts) ?? (u.costUsd != null && costOf(u.costUsd) === undefined ? `costUsd: ${String(u.costUsd)} (a cost must be a finite amount from 0 to ${maxReportedCostUsd} USD)` : undefined);
  if (problem !== undefined) {
    // Refused as a whole, never summed; a re-report keeps its place so the refusal lands on the call it names.
    const refused = refusedUsage(line, problem);
    if (u.attempt && u.attempt !== attemptId && u.call != null && u.turn != null) return [refused[0], { type: 'usage', usage: noUsage, recovered: { attemptId: u.attempt, turn: u.turn, call: u.call } }];
    return [refused[0], { type: 'usage', usage: noUsage, ...(u.call != null ? { call: u.call } : {}) }];
  }
  const usage = usageOf(counts);
  const cost = u.costUsd == null ? {} : { costUsd: u.costUsd };
  // A call of an earlier attempt, re-reported because its acknowledgement never came.
  if (u.attempt && u.attempt !== attemptId) {
    if (u.call == null || u.turn == null) return malformedTerminal(line, 'usage', 'a re-reported call needs its attempt, turn and call');
    return { type: 'usage', usage, ...cost, recovered: { attemptId: u.attempt, turn: u.turn, call: u.call } };
  }
  return { type: 'usage', usage, ...cost, ...(u.call != null ? { call: u.call } : {}) };
}

function mapComplete(json: unknown, line: string): Mapped {
  const parsed = completeLine.safeParse(json);
  if (!parsed.success) return malformedTerminal(line, 'complete');
  const { text, sessionId, resumed, model } = parsed.data;
  const complete: HarnessEvent = { type: 'turn-complete', text };
  if (!sessionId) return complete;
  return [{ type: 'session', sessionId, resumed: resumed ?? undefined, model: model ?? undefined }, complete];
}

/** One stdio-JSON line as events. */
export function mapStdioJsonLine(line: string, attemptId: string | undefined): Mapped {
  // Not a JSON object: said at once, without a parser's exception or a schema's error report (a flooding harness
  // prints millions of these, and each costs the worker's only thread).
  const json = /^\s*\{/.test(line) ? parseJsonLine(line) : undefined;
  if (json === null || typeof json !== 'object') return usageLike.test(line) ? refusedUsage(line, 'the line is not JSON') : { type: 'unknown', raw: line };
  const typed = otherLine.safeParse(json);
  // Not JSON, yet a usage report (`"input": NaN`): tokens were spent and their count cannot be read.
  if (!typed.success) return usageLike.test(line) ? refusedUsage(line, 'the line is not JSON') : { type: 'unknown', raw: line };
  switch (typed.data.type) {
    case 'session':
      return mapSession(json, line);
    case 'text': {
      const parsed = textLine.safeParse(json);
      return parsed.success ? { type: 'text', text: parsed.data.text } : { type: 'unknown', raw: line };
    }
    case 'activity': {
      const parsed = activityLine.safeParse(json);
      return parsed.success ? { type: 'activity', description: parsed.data.description } : { type: 'unknown', raw: line };
    }
    case 'permission': {
      const parsed = permissionLine.safeParse(json);
      return parsed.success ? permissionRequestOf(parsed.data) : { type: 'unknown', raw: line };
    }
    case 'usage':
      return mapUsage(json, line, attemptId);
    case 'complete':
      return mapComplete(json, line);
    case 'error': {
      const parsed = errorLine.safeParse(json);
      if (!parsed.success) return malformedTerminal(line, 'error');
      const code = knownErrorCode(parsed.data.code);
      const suffix = parsed.data.code && code !== parsed.data.code ? ` (harness code: ${parsed.data.code})` : '';
      return { type: 'session-error', code, message: parsed.data.message + suffix };
    }
    default:
      return { type: 'unknown', raw: line };
  }
}

/** The one request line that starts a turn. */
function turnRequestLine(turn: DriverTurn, capabilities: Capabilities): string {
  const request = turnRequest.parse({
    type: 'turn',
    prompt: turn.prompt,
    turn: turn.turn,
    // Only a turn that starts a session gets the contract: a resumed (or forked) session holds it already.
    systemPrompt: capabilities.systemPrompt && turn.resumeSessionId === undefined ? (turn.systemPrompt ?? null) : null,
    sessionId: turn.resumeSessionId ?? null,
    ...(turn.fork ? { fork: true as const } : {}),
    ...(turn.attemptId ? { attempt: turn.attemptId } : {}),
    model: turn.model ?? null,
    workspace: turn.workspacePath,
    permissions: turn.posture,
  });
  return `${JSON.stringify(request)}\n`;
}

/**
 * The stdio-JSON driver; `capabilities` are the catalog's overrides, for a harness that implements less of the protocol
 * than it could (the catalog's `capabilities.sessionFork` reaches the engine as `settings.forkSessions`).
 */
export function stdioJsonDriver(overrides: Partial<Capabilities> = {}): HarnessDriver {
  const capabilities: Capabilities = { ...stdioJsonCapabilities, ...overrides };
  return {
    specificationVersion: 'v2',
    driverClass: stdioJsonDriverClass,
    capabilities,
    // The harness is the author's own: it talks to whatever vendor it likes, told by its environment.
    vendor: { api: 'any', baseUrl: { env: 'DURABLE_HARNESS_BASE_URL' }, apiKey: { env: 'DURABLE_HARNESS_API_KEY' } },
    mcp: undefined,
    permissions: (posture) => {
      if (posture !== 'strict') return { posture, enforced: true };
      return capabilities.permissionHooks
        ? { posture, enforced: true, note: 'The harness is told `permissions: "strict"` and must ask through permission lines.' }
        : { posture, enforced: false, note: 'This harness is configured without permission hooks; strict is advisory.' };
    },
    command: (turn) => ({
      argv: [turn.executable, ...turn.baseArgs],
      stdin: turnRequestLine(turn, capabilities),
      // The vendor's base URL (behind the egress gateway: the sandbox's door), as the record declares.
      ...(turn.baseUrl ? { env: { DURABLE_HARNESS_BASE_URL: turn.baseUrl } } : {}),
      keepStdinOpen: true,
      // Lines up to 1 MiB; a terminal line (its `type` first) up to twice the reply cap.
      lineLimits: { maxLineBytes: maxStdioJsonLineBytes, maxLongLineBytes: longLineBytes(turn), allowsLongLine: (opening) => terminalOpening.test(opening) },
    }),
    session: () => ({
      kind: 'one-way',
      start: (turn, io): LineMapper => ({
        line: (line) => mapStdioJsonLine(line, turn.attemptId),
        oversized,
        answer: (request, answer) => {
          const response = { type: 'permission-response', id: request.id, allow: answer.allow, ...(answer.message !== undefined ? { message: answer.message } : {}), ...(answer.editedInput !== undefined ? { input: answer.editedInput } : {}) };
          io.send(JSON.stringify(permissionResponse.parse(response)));
        },
        usageAck: (ack) => JSON.stringify(usageAck.parse({ type: 'usage-ack', attempt: ack.attemptId, call: ack.call })),
      }),
    }),
  };
}

/** The stdio-JSON driver with the protocol's own capabilities. */
export const stdioJson: HarnessDriver = stdioJsonDriver();
