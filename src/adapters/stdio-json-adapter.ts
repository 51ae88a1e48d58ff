/**
 * The stdio-JSON adapter (driver class `StdioJson`): any harness that speaks the documented vocabulary
 * (docs/stdio-json.md) runs without adapter code. One process per turn; one request line on stdin, kept open
 * for permission answers; one JSON object per stdout line back.
 */
import type { z } from 'zod';
import { CliHarnessAdapter, type LineState, type TurnCommand, type TurnContext } from './cli-adapter.js';
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
import type { LineLimits, OversizedLine } from '../sandbox/line-queue.js';
import { costOf, maxReportedCostUsd, noUsage, usageOf, usageProblem } from '../contracts/usage.js';
import type { Capabilities, HarnessEvent, HarnessSessionConfig, PermissionPosture, PermissionReport, SessionErrorCode, TurnInput } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const stdioJsonDriverClass = 'StdioJson';

/** What the protocol gives every harness; a catalog entry may override individual flags. */
export const stdioJsonCapabilities: Capabilities = {
  sessionResume: true,
  structuredOutput: false,
  usageReporting: true,
  permissionHooks: true,
  modelSelection: true,
  systemPrompt: true,
};

/** Options of the stdio-JSON adapter. */
export interface StdioJsonAdapterOptions {
  /** Catalog overrides, for a harness that implements less of the protocol than it could. */
  readonly capabilities?: Partial<Capabilities>;
}

type Mapped = HarnessEvent | HarnessEvent[] | undefined;

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

function parseJson(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** Adapter for harnesses that speak stdio-JSON. */
export class StdioJsonAdapter extends CliHarnessAdapter {
  readonly driverClass = stdioJsonDriverClass;
  readonly capabilities: Capabilities;

  constructor(options: StdioJsonAdapterOptions = {}) {
    super();
    this.capabilities = { ...stdioJsonCapabilities, ...options.capabilities };
  }

  /** Forks when the harness is declared able to (`settings.forkSessions`, or `capabilities.sessionFork` in the catalog). */
  protected override forksSessions(config: HarnessSessionConfig): boolean {
    const setting = config.settings?.forkSessions;
    return typeof setting === 'boolean' ? setting : this.capabilities.sessionFork === true;
  }

  protected override permissionReport(posture: PermissionPosture): PermissionReport {
    if (posture !== 'strict') return { posture, enforced: true };
    return this.capabilities.permissionHooks
      ? { posture, enforced: true, note: 'The harness is told `permissions: "strict"` and must ask through permission lines.' }
      : { posture, enforced: false, note: 'This harness is configured without permission hooks; strict is advisory.' };
  }

  /** Lines up to 1 MiB; a terminal line (its `type` first) up to twice the reply cap. */
  protected override lineLimits(config: HarnessSessionConfig): LineLimits {
    return { maxLineBytes: maxStdioJsonLineBytes, maxLongLineBytes: this.longLineBytes(config), allowsLongLine: (opening) => terminalOpening.test(opening) };
  }

  /**
   * A terminal line too large to read ends the turn, saying so; a usage line too large to read is usage of unknown
   * size (tokens were spent); any other is reported as `line-too-large` and the turn goes on.
   */
  protected override mapOversizedLine(line: OversizedLine, _state: LineState): HarnessEvent[] {
    const what = `a line of ${line.bytes} bytes, over the limit of ${line.limit} bytes`;
    const tooLarge: HarnessEvent = { type: 'line-too-large', bytes: line.bytes, limit: line.limit, opening: line.opening };
    const kind = terminalOpening.exec(line.opening)?.[1];
    if (kind !== undefined) {
      return [tooLarge, { type: 'session-error', code: 'protocol-error', message: `The harness printed a "${kind}" line of ${line.bytes} bytes, over the limit of ${line.limit} bytes (twice this harness's maxReplyBytes); it was not read (see docs/stdio-json.md).` }];
    }
    if (usageOpening.test(line.opening)) return [tooLarge, ...refusedUsage(line.opening, what)];
    return [tooLarge];
  }

  protected override buildTurn(input: TurnInput, ctx: TurnContext): TurnCommand {
    const request = turnRequest.parse({
      type: 'turn',
      prompt: input.prompt,
      turn: input.turn,
      systemPrompt: this.capabilities.systemPrompt ? (ctx.systemPrompt ?? null) : null,
      sessionId: ctx.resumeSessionId ?? null,
      ...(ctx.fork ? { fork: true as const } : {}),
      ...(input.attemptId ? { attempt: input.attemptId } : {}),
      model: ctx.config.model ?? null,
      workspace: ctx.config.workspacePath,
      permissions: ctx.posture,
    });
    return {
      argv: [ctx.config.executable, ...ctx.config.baseArgs],
      stdin: `${JSON.stringify(request)}\n`,
      keepStdinOpen: true,
    };
  }

  protected override formatUsageAck(ack: { attemptId: string; call: number }): string {
    return JSON.stringify(usageAck.parse({ type: 'usage-ack', attempt: ack.attemptId, call: ack.call }));
  }

  protected override formatResponse(requestId: string, decision: { allow: boolean; message?: string; editedInput?: unknown }): string {
    const { editedInput, ...rest } = decision;
    return JSON.stringify(permissionResponse.parse({ type: 'permission-response', id: requestId, ...rest, ...(editedInput !== undefined ? { input: editedInput } : {}) }));
  }

  protected override mapLine(line: string, state: LineState): Mapped {
    // Not a JSON object: said at once, without a parser's exception or a schema's error report (a flooding harness
    // prints millions of these, and each costs the worker's only thread).
    const json = /^\s*\{/.test(line) ? parseJson(line) : undefined;
    if (json === null || typeof json !== 'object') return usageLike.test(line) ? refusedUsage(line, 'the line is not JSON') : { type: 'unknown', raw: line };
    const typed = otherLine.safeParse(json);
    // Not JSON, yet a usage report (`"input": NaN`): tokens were spent and their count cannot be read.
    if (!typed.success) return usageLike.test(line) ? refusedUsage(line, 'the line is not JSON') : { type: 'unknown', raw: line };
    switch (typed.data.type) {
      case 'session':
        return this.mapSession(json, line);
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
        return this.mapUsage(json, line, state);
      case 'complete':
        return this.mapComplete(json, line);
      case 'error': {
        const parsed = errorLine.safeParse(json);
        if (!parsed.success) return this.malformedTerminal(line, 'error');
        const code = knownErrorCode(parsed.data.code);
        const suffix = parsed.data.code && code !== parsed.data.code ? ` (harness code: ${parsed.data.code})` : '';
        return { type: 'session-error', code, message: parsed.data.message + suffix };
      }
      default:
        return { type: 'unknown', raw: line };
    }
  }

  private mapSession(json: unknown, line: string): Mapped {
    const parsed = sessionLine.safeParse(json);
    if (!parsed.success) return { type: 'unknown', raw: line };
    const { id, resumed, model } = parsed.data;
    return { type: 'session', sessionId: id, resumed: resumed ?? undefined, model: model ?? undefined };
  }

  /** A usage line the runtime cannot read exactly ends the turn: tokens must never silently count as nothing. */
  private mapUsage(json: unknown, line: string, state: LineState): Mapped {
    const parsed = usageLine.safeParse(json);
    if (!parsed.success) {
      const problems = parsed.error.issues.map((i) => (i.code === 'unrecognized_keys' ? `unknown field(s) ${i.keys.join(', ')}` : `${i.path.join('.')}: ${i.message}`));
      return this.malformedTerminal(line, 'usage', problems.join('; '));
    }
    const u = parsed.data;
    const counts = { input: u.input, output: u.output, cacheRead: u.cacheRead, cacheWrite: u.cacheWrite, reasoning: u.reasoning };
    const problem = usageProblem(counts) ?? (u.costUsd != null && costOf(u.costUsd) === undefined ? `costUsd: ${String(u.costUsd)} (a cost must be a finite amount from 0 to ${maxReportedCostUsd} USD)` : undefined);
    if (problem !== undefined) {
      // Refused as a whole, never summed; a re-report keeps its place so the refusal lands on the call it names.
      const refused = refusedUsage(line, problem);
      if (u.attempt && u.attempt !== state.attemptId && u.call != null && u.turn != null) return [refused[0], { type: 'usage', usage: noUsage, recovered: { attemptId: u.attempt, turn: u.turn, call: u.call } }];
      return [refused[0], { type: 'usage', usage: noUsage, ...(u.call != null ? { call: u.call } : {}) }];
    }
    const usage = usageOf(counts);
    const cost = u.costUsd == null ? {} : { costUsd: u.costUsd };
    // A call of an earlier attempt, re-reported because its acknowledgement never came.
    if (u.attempt && u.attempt !== state.attemptId) {
      if (u.call == null || u.turn == null) return this.malformedTerminal(line, 'usage', 'a re-reported call needs its attempt, turn and call');
      return { type: 'usage', usage, ...cost, recovered: { attemptId: u.attempt, turn: u.turn, call: u.call } };
    }
    return { type: 'usage', usage, ...cost, ...(u.call != null ? { call: u.call } : {}) };
  }

  private mapComplete(json: unknown, line: string): Mapped {
    const parsed = completeLine.safeParse(json);
    if (!parsed.success) return this.malformedTerminal(line, 'complete');
    const { text, sessionId, resumed, model } = parsed.data;
    const complete: HarnessEvent = { type: 'turn-complete', text };
    if (!sessionId) return complete;
    return [{ type: 'session', sessionId, resumed: resumed ?? undefined, model: model ?? undefined }, complete];
  }

  /** A terminal (or usage) line with bad fields ends the turn, with an error that says what was wrong. */
  private malformedTerminal(line: string, type: 'complete' | 'error' | 'usage', problem?: string): HarnessEvent {
    const shown = line.length > 200 ? `${line.slice(0, 200)}…` : line;
    const why = problem ? ` (${problem})` : '';
    return { type: 'session-error', code: 'protocol-error', message: `The harness printed a malformed "${type}" line${why} (see docs/stdio-json.md): ${shown}` };
  }
}
