/**
 * Pi's two-way mode, one top-down session per turn: `pi --mode rpc` with a small extension (written into the run's home and loaded with `-e`)
 * whose `tool_call` handler asks before EVERY tool runs. Pi has no permission model of its own; its extension
 * API lets a `tool_call` handler block a call (`{block: true, reason}`, the model sees the reason) or rewrite
 * `event.input` in place (a native edit), and in RPC mode `ctx.ui` dialogs become `extension_ui_request` lines
 * that wait for an `extension_ui_response`. The extension uses the `editor` dialog (not `confirm`) because its
 * answer is text: the runtime's decision as JSON `{allow, input?, message?}`, prefilled with the request as JSON.
 * A missing or unreadable answer blocks the call (fail closed).
 *
 *   → {"id":"durable-harness-state","type":"get_state"} (→ data.sessionId) and {"type":"prompt","message":…}
 *   ← the same agent events as `--mode json` (message_end, tool_execution_*, agent_end), `response` lines, and
 *     `extension_ui_request` {id, method: "editor", title: "durable-harness:permission", prefill}
 *   → `extension_ui_response` {id, value: the decision as JSON} (dialogs of other extensions: {id, cancelled: true})
 *
 * The agent events are mapped by the driver's own line mapper (the one of `--mode json`, which also hears of the
 * session id as its `session` line); this session adds the RPC lines, the gate's dialogs and their answers.
 */
import { z } from 'zod';
import type { PermissionKind, PermissionRequest } from '../../permissions/types.js';
import type { DriverTurn, LineMapper, Mapped, SessionIo, TwoWaySession, WireAnswer } from '../driver.js';
import { parseJsonLine } from '../kit.js';
import type { HarnessEvent, TerminalEvent } from '../types.js';

/** The dialog title that marks the gate's requests. */
export const piGateTitle = 'durable-harness:permission';

/** The extension pi loads in two-way mode. Plain ESM JavaScript: pi loads it with jiti, inside the sandbox. */
export const piGateExtension = `// durable-harness permission gate (written by the Pi adapter; see src/adapters/two-way/pi-rpc.ts).
export default function (pi) {
  pi.on("tool_call", async (event, ctx) => {
    const request = JSON.stringify({ tool: event.toolName, toolCallId: event.toolCallId, input: event.input });
    let answer;
    try {
      answer = JSON.parse((await ctx.ui.editor(${JSON.stringify(piGateTitle)}, request)) ?? "");
    } catch {
      answer = undefined;
    }
    if (!answer || answer.allow !== true) {
      const reason = answer && typeof answer.message === "string" && answer.message ? answer.message : "Denied: no permission decision arrived.";
      return { block: true, reason };
    }
    if (answer.input && typeof answer.input === "object") {
      for (const key of Object.keys(event.input)) delete event.input[key];
      Object.assign(event.input, answer.input);
    }
    return undefined;
  });
}
`;

export const piStateRequestId = 'durable-harness-state';

const responseLine = z.object({
  type: z.literal('response'),
  id: z.string().nullish(),
  command: z.string().nullish(),
  success: z.boolean().nullish(),
  error: z.string().nullish(),
  data: z.object({ sessionId: z.string().nullish() }).loose().nullish(),
});
const uiRequestLine = z.object({ type: z.literal('extension_ui_request'), id: z.string(), method: z.string(), title: z.string().nullish(), prefill: z.string().nullish() });
const gateRequest = z.object({ tool: z.string(), toolCallId: z.string().nullish(), input: z.unknown().optional() });

const kinds: Record<string, PermissionKind> = { bash: 'command', write: 'edit', edit: 'edit', read: 'read', grep: 'read', find: 'read', ls: 'read' };
const dialogs = new Set(['select', 'confirm', 'input', 'editor']);

/** The RPC commands that start a turn: the session's id, then the prompt. */
function startLines(prompt: string): string[] {
  return [JSON.stringify({ id: piStateRequestId, type: 'get_state' }), JSON.stringify({ id: 'durable-harness-prompt', type: 'prompt', message: prompt })];
}

/** A gate dialog in the runtime's vocabulary. */
export function piPermissionRequest(requestId: string, tool: string, input: unknown): PermissionRequest {
  const fields = (input ?? {}) as Record<string, unknown>;
  const kind = kinds[tool] ?? 'other';
  const command = kind === 'command' && typeof fields.command === 'string' ? fields.command : undefined;
  const file = typeof fields.path === 'string' ? fields.path : undefined;
  return {
    id: requestId,
    tool,
    kind,
    input: input ?? {},
    title: command ?? (file !== undefined ? `${tool} ${file}` : tool),
    ...(command !== undefined ? { command } : {}),
    ...(file !== undefined ? { paths: [file] } : {}),
    options: { edit: 'native', denyMessage: true },
  };
}

/** What the pi driver supplies: its line mapper for the agent events, and how it explains an exit. */
export interface PiHost {
  /** The mapper of `--mode json`'s agent events for this turn. */
  agentEvents(turn: DriverTurn): LineMapper;
  exit?(turn: DriverTurn, code: number | null, stderrTail: string): TerminalEvent | undefined;
}

/** The two-way session of `pi --mode rpc` with the gate extension. */
export function piRpcSession(host: PiHost): TwoWaySession {
  return {
    kind: 'two-way',
    run: (turn, io) => converse(host.agentEvents(turn), turn, io),
    ...(host.exit ? { exit: host.exit.bind(host) } : {}),
  };
}

async function converse(mapper: LineMapper, turn: DriverTurn, io: SessionIo): Promise<TerminalEvent | undefined> {
  const send = (line: string): void => {
    // No answer reaches a process that is being killed: an allow would let its tool run.
    if (!io.signal.aborted) io.send(line);
  };
  for (const line of startLines(turn.prompt)) send(line);
  for await (const line of io.lines) {
    const json = parseJsonLine(line);
    const response = responseLine.safeParse(json);
    if (response.success) {
      const r = response.data;
      // The session as `--mode json` announces it, so the mapper knows it (its model comes with the first reply).
      if (r.id === piStateRequestId && r.data?.sessionId) emitAll(io, await agentEvents(mapper, JSON.stringify({ type: 'session', id: r.data.sessionId })));
      else if (r.success === false) return { type: 'session-error', code: 'protocol-error', message: `pi refused ${r.command ?? 'a command'}: ${r.error ?? 'no reason'}` };
      continue;
    }
    const ui = uiRequestLine.safeParse(json);
    if (ui.success) {
      const request = ui.data.title === piGateTitle ? gateRequest.safeParse(parseJsonLine(ui.data.prefill ?? 'null')) : undefined;
      if (request?.success) {
        const wire = await io.gate(piPermissionRequest(ui.data.id, request.data.tool, request.data.input));
        send(JSON.stringify({ type: 'extension_ui_response', id: ui.data.id, value: JSON.stringify(decision(wire)) }));
      } else if (dialogs.has(ui.data.method)) {
        // Another extension's dialog is dismissed, so it can never stall a turn.
        send(JSON.stringify({ type: 'extension_ui_response', id: ui.data.id, cancelled: true }));
      }
      continue;
    }
    const terminal = emitAll(io, await agentEvents(mapper, line));
    if (terminal) return terminal;
  }
  // The output ended first (an exit, or a stop): a model call it was making is spent, of unknown usage.
  emitAll(io, asList(await mapper.unreported?.()));
  return undefined;
}

/** The gate dialog's answer. */
function decision(wire: WireAnswer): { allow: boolean; input?: unknown; message?: string } {
  return wire.allow ? { allow: true, ...(wire.editedInput !== undefined ? { input: wire.editedInput } : {}) } : { allow: false, message: wire.message ?? 'Denied.' };
}

/** One agent event line through the mapper; a line it cannot map is `unknown`. */
async function agentEvents(mapper: LineMapper, line: string): Promise<readonly HarnessEvent[]> {
  try {
    return asList(await mapper.line(line));
  } catch {
    return [{ type: 'unknown', raw: line }];
  }
}

/** Emits the events up to a terminal one, which it returns. */
function emitAll(io: SessionIo, events: readonly HarnessEvent[]): TerminalEvent | undefined {
  for (const event of events) {
    if (event.type === 'turn-complete' || event.type === 'session-error') return event;
    io.emit(event);
  }
  return undefined;
}

function asList(mapped: Mapped): readonly HarnessEvent[] {
  if (mapped === undefined) return [];
  return Array.isArray(mapped) ? (mapped as readonly HarnessEvent[]) : [mapped as HarnessEvent];
}
