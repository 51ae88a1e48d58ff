/**
 * Pi's two-way mode: `pi --mode rpc` with a small extension (written into the run's home and loaded with `-e`)
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
 */
import { z } from 'zod';
import type { PermissionKind, PermissionRequest } from '../permissions/types.js';
import type { LineState, WireAnswer } from './cli-adapter.js';
import type { HarnessEvent } from './types.js';

/** The dialog title that marks the gate's requests. */
export const piGateTitle = 'durable-harness:permission';

/** The extension pi loads in two-way mode. Plain ESM JavaScript: pi loads it with jiti, inside the sandbox. */
export const piGateExtension = `// durable-harness permission gate (written by the Pi adapter; see src/adapters/pi-rpc.ts).
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

/** The RPC lines that start a turn. */
export function piRpcStdin(prompt: string): string {
  return [{ id: piStateRequestId, type: 'get_state' }, { id: 'durable-harness-prompt', type: 'prompt', message: prompt }].map((l) => `${JSON.stringify(l)}\n`).join('');
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

/**
 * Maps the RPC-only lines; `undefined` means "an agent event like in --mode json" for the caller's own mapper.
 * Dialogs other than the gate's are dismissed so an extension the user loaded can never stall a turn.
 */
export function mapPiRpcLine(json: unknown, state: LineState): HarnessEvent | HarnessEvent[] | 'agent-event' {
  const response = responseLine.safeParse(json);
  if (response.success) {
    const r = response.data;
    if (r.id === piStateRequestId && r.data?.sessionId) return { type: 'session', sessionId: r.data.sessionId };
    if (r.success === false) return { type: 'session-error', code: 'protocol-error', message: `pi refused ${r.command ?? 'a command'}: ${r.error ?? 'no reason'}` };
    return [];
  }
  const ui = uiRequestLine.safeParse(json);
  if (ui.success) {
    const request = ui.data.title === piGateTitle ? gateRequest.safeParse(JSON.parse(ui.data.prefill ?? 'null')) : undefined;
    if (request?.success) return { type: 'permission-request', ...piPermissionRequest(ui.data.id, request.data.tool, request.data.input) };
    if (dialogs.has(ui.data.method)) state.send(JSON.stringify({ type: 'extension_ui_response', id: ui.data.id, cancelled: true }));
    return [];
  }
  return 'agent-event';
}

/** The gate dialog's answer. */
export function answerPiRequest(request: PermissionRequest, wire: WireAnswer, state: LineState): void {
  const value = wire.allow
    ? { allow: true, ...(wire.editedInput !== undefined ? { input: wire.editedInput } : {}) }
    : { allow: false, message: wire.message ?? 'Denied.' };
  state.send(JSON.stringify({ type: 'extension_ui_response', id: request.id, value: JSON.stringify(value) }));
}
