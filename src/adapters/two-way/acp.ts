/**
 * One turn of an Agent Client Protocol agent (gemini `--acp`, `opencode acp`), as the client, over the official
 * SDK (`@agentclientprotocol/sdk`): its connection frames and numbers the JSON-RPC and validates what the agent
 * sends; this file is the conversation, top-down:
 *
 *   initialize {protocolVersion: 1, no fs, no terminal} → session/new {cwd, mcpServers: []}, or session/load
 *   {sessionId, cwd, mcpServers: []} (or, to continue it in a new branch, session/fork → {sessionId: the branch})
 *   → session/prompt {sessionId, prompt: [{type: text}]} → its result {stopReason, usage?, _meta?}; then, while the
 *   engine has a follow-up (what a permission answer could not carry), another prompt in the same session.
 *
 * Meanwhile the agent sends `session/update` (text chunks, tool calls; on load the history is replayed first —
 * after the load's result, up to the `available_commands_update` it sends once done (measured on gemini 0.61.0) —
 * and ignored here) and asks `session/request_permission` (the agent waits): the gate decides, and the answer picks
 * the `allow_once` or `reject_once` option. The CLI's own "always" is never granted: every request passes the gate.
 * ACP carries neither an edited input nor a denial's reason: both reach the model as a follow-up prompt.
 */
import { client, RequestError, type RequestPermissionRequest, type RequestPermissionResponse, type SessionNotification, type ToolCallUpdate } from '@agentclientprotocol/sdk';
import { z } from 'zod';
import type { PermissionKind, PermissionRequest } from '../../permissions/types.js';
import { noUsage } from '../../contracts/usage.js';
import type { DriverTurn, SessionIo, TwoWaySession, WireAnswer } from '../driver.js';
import { sessionError } from '../kit.js';
import type { HarnessEvent, TerminalEvent, Usage } from '../types.js';
import { errorText, methodNotFound } from './json-rpc.js';
import { messageStreams } from './streams.js';

/** The prompt's result as the agent sent it (responses are not validated by the SDK: this is). */
export const promptResult = z.object({
  stopReason: z.string().nullish(),
  usage: z.object({ inputTokens: z.number().nullish(), outputTokens: z.number().nullish(), cachedReadTokens: z.number().nullish(), cachedWriteTokens: z.number().nullish() }).loose().nullish(),
  _meta: z.record(z.string(), z.unknown()).nullish(),
});
export type PromptResult = z.infer<typeof promptResult>;

const sessionResult = z.object({ sessionId: z.string().min(1) });

/** One model call as the agent's own store recorded it. */
export interface StoredCall {
  /** The store's id for it: each call is booked once. */
  readonly id: string;
  /** Its usage; `undefined` while the call is not finished (the store has no final count yet). */
  readonly usage: Usage | undefined;
  readonly costUsd?: number;
  readonly model?: string;
}

/** What differs between ACP agents. */
export interface AcpAgent {
  /** A name for the CLI in messages. */
  readonly label: string;
  /** Whether a resumed turn with `turn.fork` continues in a branch (`session/fork`); else `session/load`. */
  readonly forks: boolean;
  /** The terminal event for a session the agent does not know. */
  resumeFailed(turn: DriverTurn, reason: string): TerminalEvent;
  /**
   * The model calls the agent stored for `sessionId` since `since` (epoch ms), in order: its usage per call (the
   * prompt's own ACP usage is partial); empty when the store cannot be read.
   */
  storedCalls(turn: DriverTurn, sessionId: string, since: number): readonly StoredCall[];
  /** Usage from the prompt's own result, only when the store had nothing: partial, and says so. */
  resultUsage(result: PromptResult, sessionId: string): HarnessEvent[];
  /** The terminal event for an exit without a prompt result, when the agent explains it better than the engine. */
  exit?(turn: DriverTurn, code: number | null, stderrTail: string): TerminalEvent | undefined;
}

const kinds: Record<string, PermissionKind> = { execute: 'command', edit: 'edit', delete: 'edit', move: 'edit', read: 'read', search: 'read' };

/** The two-way session of an ACP agent. */
export function acpSession(agent: AcpAgent): TwoWaySession {
  return {
    kind: 'two-way',
    run: (turn, io) => new AcpTurn(agent, turn, io).run(),
    ...(agent.exit ? { exit: agent.exit.bind(agent) } : {}),
  };
}

/** One turn's conversation and what it learnt so far. */
class AcpTurn {
  private sessionId: string | undefined;
  /** When this turn's first prompt was sent (epoch ms): its calls are read from the store from then on. */
  private startedAt: number | undefined;
  /** Store ids of the calls booked this turn. */
  private readonly booked = new Set<string>();
  /** The last read of the store found an unfinished call (its usage comes when it ends). */
  private openCall = false;
  /** The agent runs a tool or waits for a permission answer: no model call is in flight. */
  private idle = true;
  /** Updates are this turn's output (a prompt was sent), not a replayed history. */
  private prompting = false;
  /** After session/load: history is being replayed until `available_commands_update` (or a live request). */
  private replaying = false;
  /** The envelope is the text after the last tool call. */
  private text = '';
  /** Tool names from `tool_call` updates (opencode names the tool there; gemini in the call id). */
  private readonly toolNames = new Map<string, string>();

  constructor(
    private readonly agent: AcpAgent,
    private readonly turn: DriverTurn,
    private readonly io: SessionIo,
  ) {}

  async run(): Promise<TerminalEvent | undefined> {
    const app = client()
      .onRequest('session/request_permission', ({ params, requestId }) => this.permission(params, `acp-${String(requestId)}`))
      .onNotification('session/update', ({ params }) => this.update(params))
      // The client offers no file system and no terminal (opencode asks all the same): the agent uses its own tools.
      .onRequest('fs/write_text_file', ({ method }) => refuse(method))
      .onRequest('fs/read_text_file', ({ method }) => refuse(method))
      .onRequest('*', ({ method }) => refuse(method));
    const connection = app.connect(messageStreams(this.io));
    const acp = connection.agent;
    try {
      const label = this.agent.label;
      try {
        await acp.request('initialize', { protocolVersion: 1, clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false } });
      } catch (error) {
        if (!(error instanceof RequestError)) return this.cutOff();
        return sessionError('protocol-error', `${label} refused ACP initialize: ${acpErrorText(error)}`);
      }
      const { resumeSessionId, workspacePath: cwd } = this.turn;
      const fork = resumeSessionId !== undefined && this.agent.forks && this.turn.fork;
      try {
        if (resumeSessionId === undefined) this.sessionId = sessionResult.parse(await acp.request('session/new', { cwd, mcpServers: [] })).sessionId;
        else if (fork) this.sessionId = sessionResult.parse(await acp.request('session/fork', { sessionId: resumeSessionId, cwd, mcpServers: [] })).sessionId;
        else {
          this.replaying = true;
          await acp.request('session/load', { sessionId: resumeSessionId, cwd, mcpServers: [] });
          this.sessionId = resumeSessionId;
        }
      } catch (error) {
        if (error instanceof z.ZodError) return sessionError('protocol-error', `${label} answered ${fork ? 'session/fork' : 'session/new'} without a session id`);
        if (!(error instanceof RequestError)) return this.cutOff();
        if (resumeSessionId !== undefined) return this.agent.resumeFailed(this.turn, acpErrorText(error));
        return sessionError('protocol-error', `${label} could not start an ACP session: ${acpErrorText(error)}`);
      }
      const sessionId = this.sessionId;
      this.io.emit({ type: 'session', sessionId, resumed: resumeSessionId !== undefined });
      for (let text: string | undefined = this.turn.prompt, first = true; text !== undefined; text = this.io.followUp(), first = false) {
        if (!first) this.io.emit({ type: 'activity', description: `follow-up: telling ${label} what its permission answers could not` });
        this.prompting = true;
        this.text = '';
        this.idle = false;
        this.startedAt ??= Date.now();
        let raw: unknown;
        try {
          raw = await acp.request('session/prompt', { sessionId, prompt: [{ type: 'text', text }] });
        } catch (error) {
          if (!(error instanceof RequestError)) return this.cutOff();
          return sessionError('vendor-error', `${label} failed the prompt: ${acpErrorText(error)}`);
        }
        this.idle = true;
        const result = promptResult.safeParse(raw ?? {});
        for (const event of result.success ? this.promptUsage(result.data, sessionId) : []) this.io.emit(event);
        const stop = result.success ? (result.data.stopReason ?? 'end_turn') : 'end_turn';
        if (stop === 'refusal' || stop === 'cancelled') return sessionError('vendor-error', `${label} ended the prompt: ${stop}`);
      }
      this.prompting = false;
      return { type: 'turn-complete', text: this.text };
    } finally {
      connection.close();
    }
  }

  /**
   * The output ended before an answer (the process exited, or the turn was stopped and it was killed): what it spent
   * beyond what was booked is reported, and the turn ends without a terminal event of its own — the engine explains
   * the exit or the stop.
   */
  private cutOff(): undefined {
    for (const event of this.unreported()) this.io.emit(event);
    return undefined;
  }

  /**
   * What a turn cut off before its prompt's result spent beyond what was booked: the finished calls in the store no
   * event brought, and a call of unknown usage for each unfinished one — or, when the store shows none, for a call
   * the agent was making.
   */
  private unreported(): HarnessEvent[] {
    if (!this.prompting || this.sessionId === undefined) return [];
    this.prompting = false;
    const stored = this.agent.storedCalls(this.turn, this.sessionId, this.startedAt ?? 0);
    const events = this.book(stored);
    const unfinished = stored.filter((c) => c.usage === undefined && !this.booked.has(c.id));
    for (const c of unfinished) {
      this.booked.add(c.id);
      events.push({ type: 'usage', usage: noUsage });
    }
    if (unfinished.length === 0 && !this.idle && events.length === 0) events.push({ type: 'usage', usage: noUsage });
    return events;
  }

  /** The finished calls of `stored` not booked yet, as usage events. */
  private book(stored: readonly StoredCall[]): HarnessEvent[] {
    const events: HarnessEvent[] = [];
    for (const call of stored) {
      if (call.usage === undefined || this.booked.has(call.id)) continue;
      this.booked.add(call.id);
      events.push({ type: 'usage', usage: call.usage, ...(call.costUsd !== undefined ? { costUsd: call.costUsd } : {}) });
    }
    this.openCall = stored.length > 0 && stored.at(-1)?.usage === undefined;
    return events;
  }

  /** A prompt's usage: its calls from the store not booked yet; the prompt's own usage only if the store had none. */
  private promptUsage(result: PromptResult, sessionId: string): HarnessEvent[] {
    const stored = this.agent.storedCalls(this.turn, sessionId, this.startedAt ?? 0);
    const hadBooked = this.booked.size > 0;
    const events = this.book(stored);
    // An unfinished call at the prompt's end will never finish: spent, count unknown.
    for (const c of stored) {
      if (c.usage !== undefined || this.booked.has(c.id)) continue;
      this.booked.add(c.id);
      events.push({ type: 'usage', usage: noUsage });
    }
    this.openCall = false;
    const model = stored.at(-1)?.model;
    if (model) events.push({ type: 'session', sessionId, model });
    if (stored.length > 0) return events;
    // Nothing readable in the store: the prompt's own figure (partial), unless calls of this turn were booked from
    // the store before — then the rest cannot be told apart from them, and is unknown.
    return hadBooked ? [{ type: 'usage', usage: noUsage }] : this.agent.resultUsage(result, sessionId);
  }

  private async permission(params: RequestPermissionRequest, requestId: string): Promise<RequestPermissionResponse> {
    this.replaying = false;
    this.idle = true;
    // The calls so far, the one that asks included where the store has it (gemini), are booked before the wait: a
    // cancel or a dead worker meanwhile loses none. One the store has not finished (opencode) stays open.
    if (this.sessionId !== undefined) for (const event of this.book(this.agent.storedCalls(this.turn, this.sessionId, this.startedAt ?? 0))) this.io.emit(event);
    const request = acpPermissionRequest(requestId, params.toolCall, this.toolNames.get(params.toolCall.toolCallId));
    const wire = await this.io.gate(request, { callOpen: this.openCall });
    return { outcome: chosen(params, wire) };
  }

  private update(params: SessionNotification): void {
    const u = params.update;
    // On session/load the agent replays the history first: none of that is this turn's output.
    if (!this.prompting) return;
    if (this.replaying) {
      if (u.sessionUpdate === 'available_commands_update' || (u.sessionUpdate === 'tool_call' && u.status !== 'completed' && u.status !== 'failed')) this.replaying = false;
      if (this.replaying || u.sessionUpdate !== 'tool_call') return;
    }
    switch (u.sessionUpdate) {
      case 'agent_message_chunk': {
        const text = u.content.type === 'text' ? u.content.text : '';
        if (!text) return;
        this.text += text;
        this.io.emit({ type: 'text', text });
        return;
      }
      case 'tool_call':
        if (u.title) this.toolNames.set(u.toolCallId, this.toolNames.get(u.toolCallId) ?? u.title);
        this.text = '';
        this.idle = u.status !== 'completed' && u.status !== 'failed';
        this.io.emit({ type: 'activity', description: `${u.title || 'tool'} (${u.status ?? 'pending'})` });
        return;
      case 'tool_call_update':
        if (u.status === 'completed' || u.status === 'failed') {
          // The tool is done: the agent calls the model with its result.
          this.idle = false;
          this.io.emit({ type: 'activity', description: `${u.title ?? u.toolCallId} → ${u.status}` });
        }
        return;
      default:
        return;
    }
  }
}

function refuse(method: string): never {
  throw new RequestError(methodNotFound, `durable-harness offers no ${method} (clientCapabilities)`);
}

/** The option the answer picks; without a matching one, "cancelled" is the protocol's safe answer: the tool does not run. */
function chosen(params: RequestPermissionRequest, wire: WireAnswer): RequestPermissionResponse['outcome'] {
  const option =
    params.options.find((o) => o.kind === (wire.allow ? 'allow_once' : 'reject_once')) ?? (wire.allow ? undefined : params.options.find((o) => o.kind === 'reject_always'));
  return option ? { outcome: 'selected', optionId: option.optionId } : { outcome: 'cancelled' };
}

function stringField(value: unknown, ...keys: string[]): string | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  for (const key of keys) {
    const v = (value as Record<string, unknown>)[key];
    if (typeof v === 'string' && v.length > 0) return v;
  }
  return undefined;
}

/** An ACP permission request in the runtime's vocabulary. */
export function acpPermissionRequest(requestId: string, call: ToolCallUpdate, knownTool?: string): PermissionRequest {
  const kind = kinds[call.kind ?? ''] ?? 'other';
  const raw = call.rawInput !== null && typeof call.rawInput === 'object' && Object.keys(call.rawInput).length > 0 ? call.rawInput : undefined;
  // Gemini names the tool in the call id (`run_shell_command__call_1`); OpenCode in its first tool_call update.
  const tool = call.toolCallId.includes('__') ? call.toolCallId.split('__')[0]! : (knownTool ?? call.kind ?? 'tool');
  const diff = call.content?.find((c) => c.type === 'diff');
  const command = kind === 'command' ? (stringField(raw, 'command') ?? call.title ?? undefined) : undefined;
  const paths = [
    ...new Set([...(call.locations ?? []).map((l) => l.path), ...(diff?.path ? [diff.path] : []), ...[stringField(raw, 'filePath', 'filepath', 'file_path', 'path')].filter((p): p is string => p !== undefined)]),
  ];
  const input = raw ?? (command !== undefined ? { command } : diff ? { path: diff.path, newText: diff.newText } : {});
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

function acpErrorText(error: unknown): string {
  if (!(error instanceof RequestError)) return error instanceof Error ? error.message : String(error);
  return errorText(error);
}
