/**
 * Codex's two-way mode: `codex app-server` (JSON-RPC on stdio, experimental in 0.171.0), measured against the
 * pinned binary. The adapter drives one turn per process:
 *
 *   → initialize → (result) → initialized + thread/start {cwd, approvalPolicy: "untrusted", sandbox: "workspace-write",
 *     model, developerInstructions} | thread/resume {threadId, …} | thread/fork {threadId, …} (a NEW thread branched
 *     from threadId, which stays as it was) → (result: thread.id, model) → turn/start
 *   ← item/started|completed (commandExecution, fileChange, agentMessage …), thread/tokenUsage/updated (`last` =
 *     one model call), turn/completed {turn: {status, error}}
 *   ← item/commandExecution/requestApproval, item/fileChange/requestApproval (server requests: codex waits)
 *   → {decision: "accept" | "decline"} (decline: the tool does not run and the turn goes on)
 *
 * Under `untrusted` codex asks before every command it does not consider safe (its own list of read-only
 * commands runs unasked) and before every file change, whatever the sandbox mode. The sandbox is
 * `workspace-write` so an ACCEPTED command can write the workspace: with `read-only`, an accepted `touch` ran
 * when codex's sandbox helper could not start but failed with "Read-only file system" when it could (measured
 * under strace), i.e. the approval would depend on the machine. Edits cannot be carried and a decline has no
 * message: both go to the model as a follow-up prompt in the same thread.
 */
import { z } from 'zod';
import type { PermissionRequest } from '../permissions/types.js';
import type { LineState, WireAnswer } from './cli-adapter.js';
import { methodNotFound, rpcError, rpcErrorText, rpcKind, rpcMessage, rpcNotification, rpcRequest, rpcResult, type RpcMessage } from './json-rpc.js';
import type { HarnessEvent, TerminalEvent, Usage } from './types.js';
import { noUsage } from '../contracts/usage.js';

/** What one app-server turn needs to know. */
export interface AppServerTurn {
  readonly prompt: string;
  readonly cwd: string;
  readonly threadId?: string;
  /** Continue `threadId` in a new thread branched from it (`thread/fork`) instead of resuming it in place. */
  readonly fork?: boolean;
  readonly model?: string;
  readonly developerInstructions?: string;
}

/** The base class's services the driver uses. */
export interface TwoWayHost {
  resumeFailed(state: LineState, detail?: { reason?: string }): TerminalEvent;
  takeFollowUp(state: LineState): string | undefined;
  usage(breakdown: TokenBreakdown): Usage;
  /** The model calls codex recorded in the thread's rollout file, in order (each with its turn). */
  rolloutCalls(threadId: string): readonly { readonly turnId: string | undefined; readonly usage: Usage }[];
}

/** `thread/tokenUsage/updated` → `tokenUsage.last`: one model call. */
export const tokenBreakdown = z.object({
  inputTokens: z.number().nullish(),
  cachedInputTokens: z.number().nullish(),
  cacheWriteInputTokens: z.number().nullish(),
  outputTokens: z.number().nullish(),
  reasoningOutputTokens: z.number().nullish(),
});
export type TokenBreakdown = z.infer<typeof tokenBreakdown>;

const threadResult = z.object({ thread: z.object({ id: z.string() }), model: z.string().nullish() });
const change = z.object({ path: z.string(), kind: z.object({ type: z.string() }).loose().nullish(), diff: z.string().nullish() });
const item = z.object({
  type: z.string(),
  id: z.string().nullish(),
  text: z.string().nullish(),
  command: z.string().nullish(),
  exitCode: z.number().nullish(),
  status: z.string().nullish(),
  changes: z.array(change).nullish(),
});
const itemNotification = z.object({ item });
const usageNotification = z.object({ turnId: z.string().nullish(), tokenUsage: z.object({ last: tokenBreakdown }) });
const turnStartResult = z.object({ turn: z.object({ id: z.string() }) });
const turnCompleted = z.object({ turn: z.object({ id: z.string().nullish(), status: z.string(), error: z.object({ message: z.string().nullish() }).loose().nullish() }) });
const commandApproval = z.object({
  itemId: z.string().nullish(),
  command: z.string().nullish(),
  cwd: z.string().nullish(),
  reason: z.string().nullish(),
  commandActions: z.array(z.object({ command: z.string().nullish() }).loose()).nullish(),
});
const fileApproval = z.object({ itemId: z.string().nullish(), reason: z.string().nullish(), grantRoot: z.string().nullish() });

/** `/bin/bash -lc 'touch a b'` → `touch a b`: codex wraps the model's command in a login shell. */
export function unwrapShell(command: string): string {
  const match = /^(?:\/usr)?\/bin\/(?:ba|z)?sh -l?c '((?:[^']|'\\'')*)'$/.exec(command.trim());
  return match ? match[1]!.replace(/'\\''/g, "'") : command;
}

interface Scratch {
  phase?: 'init' | 'thread' | 'turn' | 'done';
  nextId?: number;
  threadId?: string;
  text?: string;
  /** File changes announced by `item/started`, by item id: what a fileChange approval is about. */
  changes?: Record<string, z.infer<typeof change>[]>;
  /** JSON-RPC id of each permission request we emitted (the request id is its string form). */
  rpcIds?: Record<string, number | string>;
  /** The turns this process started: usage of other turns (a resumed thread replays its last) is not ours. */
  turns?: string[];
  /** Usage that arrived before we learnt its turn's id, by turn id. */
  early?: Record<string, TokenBreakdown[]>;
  /**
   * Per turn of ours: the calls booked (from notifications or the rollout) and the usage notifications seen. Both
   * sources list the same calls in the same order, so the n-th notification is booked only if the rollout has not
   * already booked n calls: a call is never counted twice and never missed.
   */
  booked?: Record<string, number>;
  notified?: Record<string, number>;
  /** Codex is running a tool or waiting for an approval: no model call is in flight. */
  idle?: boolean;
}

const toolItems = new Set(['commandExecution', 'fileChange', 'mcpToolCall', 'dynamicToolCall']);

const initializeId = 1;

/** Drives `codex app-server` for the Codex adapter. */
export class CodexAppServer {
  private turn: AppServerTurn | undefined;

  /** The first stdin line and remembers the turn; the rest follows the server's answers. */
  begin(turn: AppServerTurn): string {
    this.turn = turn;
    return `${rpcRequest(initializeId, 'initialize', { clientInfo: { name: 'durable-harness', version: '1' }, capabilities: null })}\n`;
  }

  map(line: string, state: LineState, host: TwoWayHost): HarnessEvent | HarnessEvent[] | undefined {
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
        return this.notification(message, state, scratch, host);
    }
  }

  /**
   * What a stopped turn spent beyond what was booked: the calls of our turns the rollout recorded that no notification
   * brought, and one call of unknown usage when the turn was cut off while codex was calling the model.
   */
  unreported(state: LineState, host: TwoWayHost): HarnessEvent[] {
    const scratch = state.scratch as Scratch;
    const events: HarnessEvent[] = this.fromRollout(scratch, host);
    if (scratch.phase === 'turn' && !scratch.idle && events.length === 0) events.push({ type: 'usage', usage: noUsage });
    scratch.phase = 'done';
    return events;
  }

  /** Books the calls of our turns that the rollout recorded and nothing booked yet. */
  private fromRollout(scratch: Scratch, host: TwoWayHost): HarnessEvent[] {
    if (!scratch.threadId || !scratch.turns?.length) return [];
    const recorded = host.rolloutCalls(scratch.threadId);
    const events: HarnessEvent[] = [];
    for (const turnId of scratch.turns) {
      const calls = recorded.filter((c) => c.turnId === turnId);
      const booked = (scratch.booked ??= {})[turnId] ?? 0;
      for (const call of calls.slice(booked)) events.push({ type: 'usage', usage: call.usage });
      scratch.booked[turnId] = Math.max(booked, calls.length);
    }
    return events;
  }

  /** One usage notification of our turn: booked unless the rollout already booked that call. */
  private notifiedUsage(scratch: Scratch, turnId: string, breakdown: TokenBreakdown, host: TwoWayHost): HarnessEvent[] {
    const seen = ((scratch.notified ??= {})[turnId] ?? 0) + 1;
    scratch.notified[turnId] = seen;
    const booked = (scratch.booked ??= {})[turnId] ?? 0;
    if (seen <= booked) return [];
    scratch.booked[turnId] = seen;
    return [{ type: 'usage', usage: host.usage(breakdown) }];
  }

  answer(request: PermissionRequest, wire: WireAnswer, state: LineState): void {
    const scratch = state.scratch as Scratch;
    const rpcId = scratch.rpcIds?.[request.id] ?? request.id;
    state.send(rpcResult(rpcId, { decision: wire.allow ? 'accept' : 'decline' }));
  }

  private send(state: LineState, scratch: Scratch, method: string, params: unknown): void {
    scratch.nextId = (scratch.nextId ?? initializeId) + 1;
    state.send(rpcRequest(scratch.nextId, method, params));
  }

  private startTurn(state: LineState, scratch: Scratch, text: string): void {
    scratch.phase = 'turn';
    scratch.idle = false;
    scratch.text = undefined;
    this.send(state, scratch, 'turn/start', { threadId: scratch.threadId, input: [{ type: 'text', text, text_elements: [] }] });
  }

  private response(message: RpcMessage, state: LineState, scratch: Scratch, host: TwoWayHost): HarnessEvent | HarnessEvent[] | undefined {
    const turn = this.turn;
    if (!turn) return undefined;
    if (message.id === initializeId) {
      if (message.error) return { type: 'session-error', code: 'protocol-error', message: `codex app-server refused initialize: ${rpcErrorText(message)}` };
      state.send(rpcNotification('initialized'));
      scratch.phase = 'thread';
      // Every command and file change asks (untrusted); what is accepted may write the workspace, nothing else.
      const common = {
        cwd: turn.cwd,
        approvalPolicy: 'untrusted',
        sandbox: 'workspace-write',
        ...(turn.model ? { model: turn.model } : {}),
        ...(turn.developerInstructions !== undefined ? { developerInstructions: turn.developerInstructions } : {}),
      };
      if (turn.threadId) this.send(state, scratch, turn.fork ? 'thread/fork' : 'thread/resume', { threadId: turn.threadId, ...common, excludeTurns: true });
      else this.send(state, scratch, 'thread/start', common);
      return undefined;
    }
    if (scratch.phase === 'thread') {
      if (message.error) {
        if (turn.threadId) return host.resumeFailed(state, { reason: rpcErrorText(message) });
        return { type: 'session-error', code: 'protocol-error', message: `codex app-server could not start a thread: ${rpcErrorText(message)}` };
      }
      const thread = threadResult.safeParse(message.result);
      if (!thread.success) return { type: 'session-error', code: 'protocol-error', message: 'codex app-server answered thread/start without a thread id' };
      scratch.threadId = thread.data.thread.id;
      this.startTurn(state, scratch, turn.prompt);
      return { type: 'session', sessionId: thread.data.thread.id, ...(thread.data.model ? { model: thread.data.model } : {}) };
    }
    if (message.error) return { type: 'session-error', code: 'vendor-error', message: `codex app-server refused the turn: ${rpcErrorText(message)}` };
    // turn/start's result: the turn runs (its end is turn/completed); its id tells our usage from replayed usage.
    const started = turnStartResult.safeParse(message.result);
    if (!started.success) return undefined;
    const id = started.data.turn.id;
    (scratch.turns ??= []).push(id);
    const early = scratch.early?.[id] ?? [];
    delete scratch.early?.[id];
    return early.flatMap((b) => this.notifiedUsage(scratch, id, b, host));
  }

  private request(message: RpcMessage, state: LineState, scratch: Scratch, host: TwoWayHost): HarnessEvent | HarnessEvent[] | undefined {
    const permission = this.permissionRequest(message, state, scratch);
    if (permission?.type !== 'permission-request') return permission;
    // Codex asks before the call that asked is reported (its notification comes after the answer, measured), but
    // its rollout already has it: booked now, so a worker that dies during the wait loses nothing.
    scratch.idle = true;
    return [...this.fromRollout(scratch, host), permission];
  }

  private permissionRequest(message: RpcMessage, state: LineState, scratch: Scratch): HarnessEvent | undefined {
    const rpcId = message.id!;
    const requestId = `codex-${String(rpcId)}`;
    if (message.method === 'item/commandExecution/requestApproval') {
      const p = commandApproval.safeParse(message.params);
      const raw = p.success ? (p.data.command ?? '') : '';
      const actions = p.success ? (p.data.commandActions ?? []).map((a) => a.command).filter((c): c is string => typeof c === 'string') : [];
      const command = actions.length === 1 ? actions[0]! : unwrapShell(raw);
      (scratch.rpcIds ??= {})[requestId] = rpcId;
      return {
        type: 'permission-request',
        id: requestId,
        tool: 'exec_command',
        kind: 'command',
        input: { command, ...(p.success && p.data.cwd ? { cwd: p.data.cwd } : {}) },
        title: command,
        command,
        options: { edit: 'emulated', denyMessage: false },
      };
    }
    if (message.method === 'item/fileChange/requestApproval') {
      const p = fileApproval.safeParse(message.params);
      const changes = (p.success && p.data.itemId ? scratch.changes?.[p.data.itemId] : undefined) ?? [];
      const paths = changes.map((c) => c.path);
      (scratch.rpcIds ??= {})[requestId] = rpcId;
      return {
        type: 'permission-request',
        id: requestId,
        tool: 'apply_patch',
        kind: 'edit',
        input: { changes: changes.map((c) => ({ path: c.path, kind: c.kind?.type ?? 'update', diff: c.diff ?? '' })) },
        title: paths.length > 0 ? `apply_patch ${changes.map((c) => `${c.kind?.type ?? 'update'} ${c.path}`).join(', ')}` : 'apply_patch',
        paths,
        options: { edit: 'emulated', denyMessage: false },
      };
    }
    // Nothing else is offered by this client (user input, MCP elicitation, dynamic tools): refuse, never hang.
    state.send(rpcError(rpcId, methodNotFound, `durable-harness does not handle ${message.method ?? 'this request'}`));
    return { type: 'activity', description: `codex request ${message.method ?? '?'} refused` };
  }

  private notification(message: RpcMessage, state: LineState, scratch: Scratch, host: TwoWayHost): HarnessEvent | HarnessEvent[] | undefined {
    switch (message.method) {
      case 'item/started':
      case 'item/completed': {
        const p = itemNotification.safeParse(message.params);
        if (!p.success) return undefined;
        return this.item(p.data.item, message.method === 'item/completed', scratch);
      }
      case 'thread/tokenUsage/updated': {
        const p = usageNotification.safeParse(message.params);
        if (!p.success || scratch.phase !== 'turn') return undefined;
        const turnId = p.data.turnId ?? scratch.turns?.at(-1);
        if (turnId && scratch.turns?.includes(turnId)) {
          // A call ended: the model is not being called until its tools ran.
          scratch.idle = true;
          return this.notifiedUsage(scratch, turnId, p.data.tokenUsage.last, host);
        }
        // Not (yet) known as ours: kept until turn/start's result names it; a replayed turn's never is.
        if (turnId) ((scratch.early ??= {})[turnId] ??= []).push(p.data.tokenUsage.last);
        return undefined;
      }
      case 'turn/completed': {
        const p = turnCompleted.safeParse(message.params);
        if (!p.success) return { type: 'session-error', code: 'protocol-error', message: 'codex app-server sent turn/completed without a turn' };
        const { status, error } = p.data.turn;
        if (status === 'completed') {
          const followUp = host.takeFollowUp(state);
          if (followUp !== undefined) {
            this.startTurn(state, scratch, followUp);
            return { type: 'activity', description: 'follow-up: telling codex what its approvals could not' };
          }
          scratch.phase = 'done';
          return { type: 'turn-complete', text: scratch.text ?? '' };
        }
        return { type: 'session-error', code: 'vendor-error', message: `Codex ended the turn ${status}: ${error?.message ?? 'no message'}` };
      }
      case 'error': {
        const p = z.object({ error: z.object({ message: z.string().nullish() }).loose().nullish(), willRetry: z.boolean().nullish() }).loose().safeParse(message.params);
        return { type: 'activity', description: `codex error: ${p.success ? (p.data.error?.message ?? '') : ''}` };
      }
      default:
        return undefined;
    }
  }

  private item(it: z.infer<typeof item>, done: boolean, scratch: Scratch): HarnessEvent | undefined {
    if (it.type === 'fileChange' && it.id && it.changes) (scratch.changes ??= {})[it.id] = it.changes;
    // A tool runs from its start to its end; when it is done codex calls the model with the result.
    if (toolItems.has(it.type)) scratch.idle = !done;
    if (it.type === 'agentMessage') {
      if (!done || typeof it.text !== 'string') return undefined;
      scratch.text = it.text;
      return { type: 'text', text: it.text };
    }
    if (it.type === 'commandExecution') {
      const command = unwrapShell(it.command ?? '');
      return { type: 'activity', description: done ? `command: ${command} → ${it.status ?? '?'}${it.exitCode != null ? ` (exit ${it.exitCode})` : ''}` : `command: ${command}` };
    }
    if (it.type === 'fileChange') {
      const what = (it.changes ?? []).map((c) => `${c.kind?.type ?? ''} ${c.path}`.trim()).join(', ');
      return { type: 'activity', description: done ? `file change: ${what} → ${it.status ?? '?'}` : `file change: ${what}` };
    }
    if (!done || it.type === 'userMessage') return undefined;
    return { type: 'activity', description: `codex item: ${it.type}` };
  }
}
