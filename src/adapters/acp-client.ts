/**
 * The client side of the Agent Client Protocol (ACP, JSON-RPC on stdio), as the two-way modes of Gemini CLI
 * (`gemini --acp`) and OpenCode (`opencode acp`) speak it. One turn per process:
 *
 *   → initialize {protocolVersion: 1, clientCapabilities: no fs, no terminal} → session/new {cwd, mcpServers: []}
 *     or session/load {sessionId, cwd, mcpServers: []} (or, to continue it in a new branch, session/fork with the
 *     same params → {sessionId: the branch}) → session/prompt {sessionId, prompt: [{type: text}]}
 *   ← session/update (agent_message_chunk, tool_call, tool_call_update, …); on load the history is replayed
 *     first — after the load's result, up to the `available_commands_update` the agent sends once it is done
 *     (measured on gemini 0.61.0) — and ignored here
 *   ← session/request_permission {toolCall: {toolCallId, title, kind, rawInput?, locations?, content?}, options}
 *     (a server request: the agent waits) → {outcome: {outcome: "selected", optionId}}
 *   ← the prompt's result {stopReason, usage?, _meta?}
 *
 * The answer picks the `allow_once` or `reject_once` option: the runtime never grants the CLI's own "always",
 * so every request passes the gate (session grants are the runtime's own). ACP has no way to carry an edited
 * input or a denial's reason: both reach the model as a follow-up prompt in the same session.
 */
import { z } from 'zod';
import type { PermissionKind, PermissionRequest } from '../permissions/types.js';
import type { LineState, WireAnswer } from './cli-adapter.js';
import { methodNotFound, rpcError, rpcErrorText, rpcKind, rpcMessage, rpcRequest, rpcResult, type RpcMessage } from './json-rpc.js';
import type { HarnessEvent, TerminalEvent, Usage } from './types.js';
import { noUsage } from '../contracts/usage.js';

/** What one ACP turn needs. */
export interface AcpTurn {
  readonly prompt: string;
  readonly cwd: string;
  /** Load this session instead of starting one. */
  readonly sessionId?: string;
  /** Continue `sessionId` in a new session branched from it (`session/fork`), leaving it as it was. */
  readonly fork?: boolean;
}

/** The prompt's result, as the agent sent it. */
export const promptResult = z.object({
  stopReason: z.string().nullish(),
  usage: z.object({ inputTokens: z.number().nullish(), outputTokens: z.number().nullish(), cachedReadTokens: z.number().nullish(), cachedWriteTokens: z.number().nullish() }).loose().nullish(),
  _meta: z.record(z.string(), z.unknown()).nullish(),
});
export type PromptResult = z.infer<typeof promptResult>;

/** One model call as the agent's own store recorded it. */
export interface StoredCall {
  /** The store's id for it: each call is booked once. */
  readonly id: string;
  /** Its usage; `undefined` while the call is not finished (the store has no final count yet). */
  readonly usage: Usage | undefined;
  readonly costUsd?: number;
  readonly model?: string;
}

/** What differs between ACP agents, and the base class's services. */
export interface AcpHost {
  resumeFailed(state: LineState, detail?: { reason?: string }): TerminalEvent;
  takeFollowUp(state: LineState): string | undefined;
  /**
   * The model calls the agent stored for `sessionId` since `since` (epoch ms), in order: its usage per call (the
   * prompt's own ACP usage is partial); empty when the store cannot be read.
   */
  storedCalls(sessionId: string, since: number): readonly StoredCall[];
  /** Usage from the prompt's own result, only when the store had nothing: partial, and says so. */
  resultUsage(result: PromptResult, sessionId: string): HarnessEvent[];
  /** A name for the CLI in messages. */
  readonly label: string;
}

const toolCall = z
  .object({
    toolCallId: z.string(),
    title: z.string().nullish(),
    kind: z.string().nullish(),
    rawInput: z.unknown().optional(),
    locations: z.array(z.object({ path: z.string() }).loose()).nullish(),
    content: z.array(z.object({ type: z.string(), path: z.string().nullish(), newText: z.string().nullish(), oldText: z.string().nullish() }).loose()).nullish(),
  })
  .loose();
const permissionParams = z.object({
  toolCall,
  options: z.array(z.object({ optionId: z.string(), kind: z.string(), name: z.string().nullish() })),
});
const update = z.object({
  update: z
    .object({
      sessionUpdate: z.string(),
      content: z.object({ type: z.string(), text: z.string().nullish() }).loose().nullish(),
      toolCallId: z.string().nullish(),
      title: z.string().nullish(),
      status: z.string().nullish(),
    })
    .loose(),
});
const newSessionResult = z.object({ sessionId: z.string() });

const kinds: Record<string, PermissionKind> = { execute: 'command', edit: 'edit', delete: 'edit', move: 'edit', read: 'read', search: 'read' };

interface Scratch {
  phase?: 'init' | 'session' | 'prompt' | 'done';
  nextId?: number;
  sessionId?: string;
  promptId?: number;
  /** When this turn's first prompt was sent (epoch ms): its calls are read from the store from then on. */
  turnStartedAt?: number;
  /** Store ids of the calls booked this turn, and whether a read found the last one unfinished. */
  booked?: string[];
  openCall?: boolean;
  /** The agent runs a tool or waits for a permission answer: no model call is in flight. */
  idle?: boolean;
  /** After session/load: history is being replayed until `available_commands_update` (or a live request). */
  replaying?: boolean;
  text?: string;
  /** Tool names from `tool_call` updates (opencode names the tool there; gemini in the call id). */
  toolNames?: Record<string, string>;
  pending?: Record<string, { rpcId: number | string; options: { optionId: string; kind: string }[] }>;
}

const initializeId = 1;

function stringField(value: unknown, ...keys: string[]): string | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  for (const key of keys) {
    const v = (value as Record<string, unknown>)[key];
    if (typeof v === 'string' && v.length > 0) return v;
  }
  return undefined;
}

/** An ACP permission request in the runtime's vocabulary. */
export function acpPermissionRequest(requestId: string, call: z.infer<typeof toolCall>, knownTool?: string): PermissionRequest {
  const kind = kinds[call.kind ?? ''] ?? 'other';
  const raw = call.rawInput !== null && typeof call.rawInput === 'object' && Object.keys(call.rawInput).length > 0 ? call.rawInput : undefined;
  // Gemini names the tool in the call id (`run_shell_command__call_1`); OpenCode in its first tool_call update.
  const tool = call.toolCallId.includes('__') ? call.toolCallId.split('__')[0]! : (knownTool ?? call.kind ?? 'tool');
  const diff = call.content?.find((c) => c.type === 'diff');
  const command = kind === 'command' ? (stringField(raw, 'command') ?? call.title ?? undefined) : undefined;
  const paths = [
    ...new Set([...(call.locations ?? []).map((l) => l.path), ...(diff?.path ? [diff.path] : []), ...[stringField(raw, 'filePath', 'filepath', 'file_path', 'path')].filter((p): p is string => p !== undefined)]),
  ];
  const input = raw ?? (command !== undefined ? { command } : diff ? { path: diff.path, newText: diff.newText ?? '' } : {});
  return {
    id: requestId,
    tool,
    kind,
    input,
    title: command ?? call.title ?? tool,
    ...(command !== undefined ? { command } : {}),
    ...(paths.length > 0 && kind !== 'command' ? { paths } : {}),
    options: { edit: 'emulated', denyMessage: false },
  };
}

/** Drives one ACP agent process per turn. */
export class AcpClient {
  private turn: AcpTurn | undefined;

  /** The first stdin line; the rest follows the agent's answers. */
  begin(turn: AcpTurn): string {
    this.turn = turn;
    return `${rpcRequest(initializeId, 'initialize', { protocolVersion: 1, clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false } })}\n`;
  }

  map(line: string, state: LineState, host: AcpHost): HarnessEvent | HarnessEvent[] | undefined {
    const parsed = rpcMessage.safeParse(JSON.parse(line));
    if (!parsed.success) return { type: 'unknown', raw: line };
    const scratch = state.scratch as Scratch;
    scratch.phase ??= 'init';
    const message = parsed.data;
    switch (rpcKind(message)) {
      case 'response':
        return this.response(message, state, scratch, host);
      case 'request':
        return this.request(message, state, scratch, host);
      case 'notification':
        return message.method === 'session/update' ? this.update(message, scratch) : undefined;
    }
  }

  /**
   * What a stopped turn spent beyond what was booked: the finished calls in the store no event brought, and a call of
   * unknown usage for each unfinished one — or, when the store shows none, for a call the agent was making.
   */
  unreported(state: LineState, host: AcpHost): HarnessEvent[] {
    const scratch = state.scratch as Scratch;
    if (scratch.phase !== 'prompt' || !scratch.sessionId) return [];
    scratch.phase = 'done';
    const stored = host.storedCalls(scratch.sessionId, scratch.turnStartedAt ?? 0);
    const events = this.book(scratch, stored);
    const unfinished = stored.filter((c) => c.usage === undefined && !scratch.booked?.includes(c.id));
    for (const c of unfinished) {
      scratch.booked!.push(c.id);
      events.push({ type: 'usage', usage: noUsage });
    }
    if (unfinished.length === 0 && !scratch.idle && events.length === 0) events.push({ type: 'usage', usage: noUsage });
    return events;
  }

  /** Whether the last read of the store found an unfinished call (its usage comes when it ends). */
  callOpen(state: LineState): boolean {
    return (state.scratch as Scratch).openCall === true;
  }

  /** The finished calls of `stored` not booked yet, as usage events (and the model of the last one). */
  private book(scratch: Scratch, stored: readonly StoredCall[]): HarnessEvent[] {
    const booked = (scratch.booked ??= []);
    const events: HarnessEvent[] = [];
    for (const call of stored) {
      if (call.usage === undefined || booked.includes(call.id)) continue;
      booked.push(call.id);
      events.push({ type: 'usage', usage: call.usage, ...(call.costUsd !== undefined ? { costUsd: call.costUsd } : {}) });
    }
    scratch.openCall = stored.at(-1)?.usage === undefined && stored.length > 0;
    return events;
  }

  answer(request: PermissionRequest, wire: WireAnswer, state: LineState): void {
    const scratch = state.scratch as Scratch;
    const pending = scratch.pending?.[request.id];
    if (!pending) return;
    delete scratch.pending![request.id];
    const option = pending.options.find((o) => o.kind === (wire.allow ? 'allow_once' : 'reject_once')) ?? (wire.allow ? undefined : pending.options.find((o) => o.kind === 'reject_always'));
    // Without a matching option, "cancelled" is the protocol's safe answer: the tool does not run.
    state.send(rpcResult(pending.rpcId, { outcome: option ? { outcome: 'selected', optionId: option.optionId } : { outcome: 'cancelled' } }));
  }

  private send(state: LineState, scratch: Scratch, method: string, params: unknown): number {
    scratch.nextId = (scratch.nextId ?? initializeId) + 1;
    state.send(rpcRequest(scratch.nextId, method, params));
    return scratch.nextId;
  }

  private prompt(state: LineState, scratch: Scratch, text: string): void {
    scratch.phase = 'prompt';
    scratch.text = '';
    scratch.idle = false;
    scratch.turnStartedAt ??= Date.now();
    scratch.promptId = this.send(state, scratch, 'session/prompt', { sessionId: scratch.sessionId, prompt: [{ type: 'text', text }] });
  }

  private response(message: RpcMessage, state: LineState, scratch: Scratch, host: AcpHost): HarnessEvent | HarnessEvent[] | undefined {
    const turn = this.turn;
    if (!turn) return undefined;
    if (message.id === initializeId) {
      if (message.error) return { type: 'session-error', code: 'protocol-error', message: `${host.label} refused ACP initialize: ${rpcErrorText(message)}` };
      scratch.phase = 'session';
      if (turn.sessionId) this.send(state, scratch, turn.fork ? 'session/fork' : 'session/load', { sessionId: turn.sessionId, cwd: turn.cwd, mcpServers: [] });
      else this.send(state, scratch, 'session/new', { cwd: turn.cwd, mcpServers: [] });
      return undefined;
    }
    if (scratch.phase === 'session') {
      if (message.error) {
        if (turn.sessionId) return host.resumeFailed(state, { reason: rpcErrorText(message) });
        return { type: 'session-error', code: 'protocol-error', message: `${host.label} could not start an ACP session: ${rpcErrorText(message)}` };
      }
      const created = newSessionResult.safeParse(message.result);
      // A fork answers with the branch's id; a load keeps the id it was given.
      const sessionId = turn.sessionId !== undefined && !turn.fork ? turn.sessionId : created.success ? created.data.sessionId : undefined;
      if (!sessionId) return { type: 'session-error', code: 'protocol-error', message: `${host.label} answered ${turn.fork ? 'session/fork' : 'session/new'} without a session id` };
      scratch.sessionId = sessionId;
      scratch.replaying = turn.sessionId !== undefined;
      this.prompt(state, scratch, turn.prompt);
      return { type: 'session', sessionId, resumed: turn.sessionId !== undefined };
    }
    if (message.id !== scratch.promptId) return undefined;
    scratch.idle = true;
    if (message.error) return { type: 'session-error', code: 'vendor-error', message: `${host.label} failed the prompt: ${rpcErrorText(message)}` };
    const result = promptResult.safeParse(message.result ?? {});
    const events = result.success ? this.promptUsage(result.data, scratch, host) : [];
    const stop = result.success ? (result.data.stopReason ?? 'end_turn') : 'end_turn';
    if (stop === 'refusal' || stop === 'cancelled') {
      events.push({ type: 'session-error', code: 'vendor-error', message: `${host.label} ended the prompt: ${stop}` });
      return events;
    }
    const followUp = host.takeFollowUp(state);
    if (followUp !== undefined) {
      this.prompt(state, scratch, followUp);
      events.push({ type: 'activity', description: `follow-up: telling ${host.label} what its permission answers could not` });
      return events;
    }
    scratch.phase = 'done';
    events.push({ type: 'turn-complete', text: scratch.text ?? '' });
    return events;
  }

  /** A prompt's usage: its calls from the store not booked yet; the prompt's own usage only if the store had none. */
  private promptUsage(result: PromptResult, scratch: Scratch, host: AcpHost): HarnessEvent[] {
    const stored = host.storedCalls(scratch.sessionId!, scratch.turnStartedAt ?? 0);
    const events = this.book(scratch, stored);
    // An unfinished call at the prompt's end will never finish: spent, count unknown.
    for (const c of stored) {
      if (c.usage !== undefined || scratch.booked!.includes(c.id)) continue;
      scratch.booked!.push(c.id);
      events.push({ type: 'usage', usage: noUsage });
    }
    scratch.openCall = false;
    const model = stored.at(-1)?.model;
    if (model) events.push({ type: 'session', sessionId: scratch.sessionId!, model });
    if (stored.length > 0) return events;
    // Nothing readable in the store: the prompt's own figure (partial), unless calls of this turn were booked from
    // the store before — then the rest cannot be told apart from them, and is unknown.
    return scratch.booked!.length > 0 ? [{ type: 'usage', usage: noUsage }] : host.resultUsage(result, scratch.sessionId!);
  }

  private request(message: RpcMessage, state: LineState, scratch: Scratch, host: AcpHost): HarnessEvent | HarnessEvent[] | undefined {
    const rpcId = message.id!;
    if (message.method === 'session/request_permission') {
      scratch.replaying = false;
      scratch.idle = true;
      // The calls so far, the one that asks included where the store has it (gemini), are booked before the wait: a
      // cancel or a dead worker meanwhile loses none. One the store has not finished (opencode) stays open.
      const booked = scratch.sessionId ? this.book(scratch, host.storedCalls(scratch.sessionId, scratch.turnStartedAt ?? 0)) : [];
      const p = permissionParams.safeParse(message.params);
      if (!p.success) {
        state.send(rpcResult(rpcId, { outcome: { outcome: 'cancelled' } }));
        return { type: 'activity', description: 'malformed permission request refused' };
      }
      const requestId = `acp-${String(rpcId)}`;
      (scratch.pending ??= {})[requestId] = { rpcId, options: p.data.options };
      const request = acpPermissionRequest(requestId, p.data.toolCall, scratch.toolNames?.[p.data.toolCall.toolCallId]);
      return [...booked, { type: 'permission-request', ...request }];
    }
    // The client offers no file system and no terminal: the agent uses its own tools (which ask first).
    state.send(rpcError(rpcId, methodNotFound, `durable-harness offers no ${message.method ?? 'such method'} (clientCapabilities)`));
    return undefined;
  }

  private update(message: RpcMessage, scratch: Scratch): HarnessEvent | undefined {
    const p = update.safeParse(message.params);
    if (!p.success) return undefined;
    const u = p.data.update;
    // On session/load the agent replays the history first: none of that is this turn's output.
    if (scratch.phase !== 'prompt') return undefined;
    if (scratch.replaying) {
      if (u.sessionUpdate === 'available_commands_update' || (u.sessionUpdate === 'tool_call' && u.status !== 'completed' && u.status !== 'failed')) scratch.replaying = false;
      if (scratch.replaying || u.sessionUpdate !== 'tool_call') return undefined;
    }
    switch (u.sessionUpdate) {
      case 'agent_message_chunk': {
        const text = u.content?.type === 'text' ? (u.content.text ?? '') : '';
        if (!text) return undefined;
        scratch.text = (scratch.text ?? '') + text;
        return { type: 'text', text };
      }
      case 'tool_call':
        if (u.toolCallId && u.title) (scratch.toolNames ??= {})[u.toolCallId] ??= u.title;
        scratch.text = ''; // the envelope is the text after the last tool call
        scratch.idle = u.status !== 'completed' && u.status !== 'failed';
        return { type: 'activity', description: `${u.title ?? 'tool'} (${u.status ?? 'pending'})` };
      case 'tool_call_update':
        if (u.status === 'completed' || u.status === 'failed') {
          // The tool is done: the agent calls the model with its result.
          scratch.idle = false;
          return { type: 'activity', description: `${u.title ?? u.toolCallId ?? 'tool'} → ${u.status}` };
        }
        return undefined;
      default:
        return undefined;
    }
  }
}
