/**
 * Codex's two-way mode, `codex app-server` (JSON-RPC on stdio, experimental in 0.171.0), as one top-down session
 * per turn, typed by the protocol the pinned binary generates (codex-protocol/, scripts/generate-codex-types.sh):
 *
 *   initialize → initialized → thread/start {cwd, approvalPolicy: "untrusted", sandbox: "workspace-write", model,
 *   developerInstructions} | thread/resume {threadId, …} | thread/fork {threadId, …} (a NEW thread branched from
 *   threadId, which stays as it was) → {thread.id, model} → turn/start → … turn/completed {turn: {status, error}};
 *   then, while the engine has a follow-up (what an approval could not carry), another turn/start in the thread.
 *
 * Meanwhile codex notifies item/started|completed (commandExecution, fileChange, agentMessage …) and
 * thread/tokenUsage/updated (`last` = one model call), and asks item/commandExecution/requestApproval and
 * item/fileChange/requestApproval (it waits) → {decision: "accept" | "decline"} (decline: the tool does not run and
 * the turn goes on).
 *
 * Under `untrusted` codex asks before every command it does not consider safe (its own list of read-only commands
 * runs unasked) and before every file change, whatever the sandbox mode. The sandbox is `workspace-write` so an
 * ACCEPTED command can write the workspace: with `read-only`, an accepted `touch` ran when codex's sandbox helper
 * could not start but failed with "Read-only file system" when it could (measured under strace), i.e. the approval
 * would depend on the machine. Edits cannot be carried and a decline has no message: both go to the model as a
 * follow-up prompt in the same thread.
 *
 * The generated types say what is sent; what codex sends is validated here (zod), as from any harness.
 */
import { z } from 'zod';
import { noUsage } from '../../contracts/usage.js';
import type { PermissionRequest } from '../../permissions/types.js';
import type { DriverTurn, SessionIo, TwoWaySession } from '../driver.js';
import { sessionError } from '../kit.js';
import type { HarnessEvent, TerminalEvent, Usage } from '../types.js';
import type { ClientInfo, ClientRequest, InitializeParams, ServerNotification, ServerRequest } from './codex-protocol/index.js';
import type { CommandExecutionRequestApprovalResponse, ThreadForkParams, ThreadResumeParams, ThreadStartParams, TurnStartParams } from './codex-protocol/v2/index.js';
import { methodNotFound, RpcError, RpcPeer } from './json-rpc.js';

/** What the codex driver supplies. */
export interface CodexHost {
  resumeFailed(turn: DriverTurn, reason: string): TerminalEvent;
  usage(breakdown: TokenBreakdown): Usage;
  /** The model calls codex recorded in the thread's rollout file, in order (each with its turn). */
  rolloutCalls(turn: DriverTurn, threadId: string): readonly { readonly turnId: string | undefined; readonly usage: Usage }[];
  exit?(turn: DriverTurn, code: number | null, stderrTail: string): TerminalEvent | undefined;
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

type Method<M extends { method: string }> = M['method'];
const methods = {
  initialize: 'initialize',
  threadStart: 'thread/start',
  threadResume: 'thread/resume',
  threadFork: 'thread/fork',
  turnStart: 'turn/start',
} as const satisfies Record<string, Method<ClientRequest>>;
const commandApprovalMethod: Method<ServerRequest> = 'item/commandExecution/requestApproval';
const fileApprovalMethod: Method<ServerRequest> = 'item/fileChange/requestApproval';
const notifications = {
  itemStarted: 'item/started',
  itemCompleted: 'item/completed',
  tokenUsage: 'thread/tokenUsage/updated',
  turnCompleted: 'turn/completed',
  error: 'error',
} as const satisfies Record<string, Method<ServerNotification>>;

const threadResult = z.object({ thread: z.object({ id: z.string() }), model: z.string().nullish() });
const change = z.object({ path: z.string(), kind: z.object({ type: z.string() }).loose().nullish(), diff: z.string().nullish() });
type Change = z.infer<typeof change>;
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
const errorNotification = z.object({ error: z.object({ message: z.string().nullish() }).loose().nullish(), willRetry: z.boolean().nullish() }).loose();

const toolItems = new Set(['commandExecution', 'fileChange', 'mcpToolCall', 'dynamicToolCall']);

/** `/bin/bash -lc 'touch a b'` → `touch a b`: codex wraps the model's command in a login shell. */
export function unwrapShell(command: string): string {
  const match = /^(?:\/usr)?\/bin\/(?:ba|z)?sh -l?c '((?:[^']|'\\'')*)'$/.exec(command.trim());
  return match ? match[1]!.replace(/'\\''/g, "'") : command;
}

/** The two-way session of `codex app-server`. */
export function codexAppServerSession(host: CodexHost): TwoWaySession {
  return {
    kind: 'two-way',
    run: (turn, io) => new AppServerTurn(host, turn, io).run(),
    ...(host.exit ? { exit: host.exit.bind(host) } : {}),
  };
}

type Completed = z.infer<typeof turnCompleted> | 'malformed';

class AppServerTurn {
  private readonly peer: RpcPeer;
  private threadId: string | undefined;
  private text: string | undefined;
  /** A turn of ours was started: usage notifications count from then on. */
  private inTurn = false;
  /** Codex is running a tool or waiting for an approval: no model call is in flight. */
  private idle = false;
  /** File changes announced by `item/started`, by item id: what a fileChange approval is about. */
  private readonly changes = new Map<string, Change[]>();
  /** The turns this process started: usage of other turns (a resumed thread replays its last) is not ours. */
  private readonly turns: string[] = [];
  /** Usage that arrived before we learnt its turn's id, by turn id. */
  private readonly early = new Map<string, TokenBreakdown[]>();
  /**
   * Per turn of ours: the calls booked (from notifications or the rollout) and the usage notifications seen. Both
   * sources list the same calls in the same order, so the n-th notification is booked only if the rollout has not
   * already booked n calls: a call is never counted twice and never missed.
   */
  private readonly booked = new Map<string, number>();
  private readonly notified = new Map<string, number>();
  /** Who waits for the running turn's `turn/completed`. */
  private completion: ((completed: Completed) => void) | undefined;

  constructor(
    private readonly host: CodexHost,
    private readonly turn: DriverTurn,
    private readonly io: SessionIo,
  ) {
    this.peer = new RpcPeer(io, { request: (method, params, id) => this.request(method, params, id), notification: (method, params) => this.notification(method, params) });
  }

  async run(): Promise<TerminalEvent | undefined> {
    void this.peer.listen();
    return this.converse();
  }

  private async converse(): Promise<TerminalEvent | undefined> {
    const { turn, peer } = this;
    // `title` is optional on the wire (an absent Option), though the generated type spells it out.
    const initialize = { clientInfo: { name: 'durable-harness', version: '1' }, capabilities: null } satisfies Omit<InitializeParams, 'clientInfo'> & { clientInfo: Omit<ClientInfo, 'title'> };
    try {
      await peer.request(methods.initialize, initialize);
    } catch (error) {
      return error instanceof RpcError ? sessionError('protocol-error', `codex app-server refused initialize: ${error.message}`) : this.cutOff();
    }
    peer.notify('initialized');
    // Every command and file change asks (untrusted); what is accepted may write the workspace, nothing else.
    const common = {
      cwd: turn.workspacePath,
      approvalPolicy: 'untrusted',
      sandbox: 'workspace-write',
      ...(turn.model ? { model: turn.model } : {}),
      ...(turn.systemPrompt !== undefined ? { developerInstructions: turn.systemPrompt } : {}),
    } as const satisfies ThreadStartParams;
    let thread: z.infer<typeof threadResult>;
    try {
      const resumed = turn.resumeSessionId;
      const answer =
        resumed === undefined
          ? await peer.request(methods.threadStart, common)
          : await peer.request(turn.fork ? methods.threadFork : methods.threadResume, { threadId: resumed, ...common, excludeTurns: true } satisfies ThreadResumeParams & ThreadForkParams);
      const parsed = threadResult.safeParse(answer);
      if (!parsed.success) return sessionError('protocol-error', 'codex app-server answered thread/start without a thread id');
      thread = parsed.data;
    } catch (error) {
      if (!(error instanceof RpcError)) return this.cutOff();
      if (turn.resumeSessionId !== undefined) return this.host.resumeFailed(turn, error.message);
      return sessionError('protocol-error', `codex app-server could not start a thread: ${error.message}`);
    }
    this.threadId = thread.thread.id;
    this.io.emit({ type: 'session', sessionId: thread.thread.id, ...(thread.model ? { model: thread.model } : {}) });
    for (let text: string | undefined = turn.prompt, first = true; text !== undefined; text = this.io.followUp(), first = false) {
      if (!first) this.io.emit({ type: 'activity', description: 'follow-up: telling codex what its approvals could not' });
      const completed = new Promise<Completed>((resolve) => (this.completion = resolve));
      this.inTurn = true;
      this.idle = false;
      this.text = undefined;
      try {
        const started = turnStartResult.safeParse(await peer.request(methods.turnStart, { threadId: thread.thread.id, input: [{ type: 'text', text, text_elements: [] }] } satisfies TurnStartParams));
        // Its id tells our usage from replayed usage; its end is turn/completed.
        if (started.success) this.ours(started.data.turn.id);
      } catch (error) {
        if (!(error instanceof RpcError)) return this.cutOff();
        return sessionError('vendor-error', `codex app-server refused the turn: ${error.message}`);
      }
      const end = await Promise.race([completed, this.peer.ended.then(() => 'closed' as const)]);
      if (end === 'closed') return this.cutOff();
      if (end === 'malformed') return sessionError('protocol-error', 'codex app-server sent turn/completed without a turn');
      const { status, error } = end.turn;
      if (status !== 'completed') return sessionError('vendor-error', `Codex ended the turn ${status}: ${error?.message ?? 'no message'}`);
    }
    this.inTurn = false;
    return { type: 'turn-complete', text: this.text ?? '' };
  }

  /** A turn of ours started: the usage that came early for it is booked. */
  private ours(turnId: string): void {
    this.turns.push(turnId);
    for (const breakdown of this.early.get(turnId) ?? []) this.emitAll(this.notifiedUsage(turnId, breakdown));
    this.early.delete(turnId);
  }

  /**
   * The output ended before the turn did (the process exited, or the turn was stopped and it was killed): the calls
   * of our turns the rollout recorded that no notification brought, and one call of unknown usage when codex was
   * calling the model. No terminal event of its own: the engine explains the exit or the stop.
   */
  private cutOff(): undefined {
    const events = this.fromRollout();
    if (this.inTurn && !this.idle && events.length === 0) events.push({ type: 'usage', usage: noUsage });
    this.inTurn = false;
    this.emitAll(events);
    return undefined;
  }

  private emitAll(events: readonly HarnessEvent[]): void {
    for (const event of events) this.io.emit(event);
  }

  /** Books the calls of our turns that the rollout recorded and nothing booked yet. */
  private fromRollout(): HarnessEvent[] {
    if (!this.threadId || this.turns.length === 0) return [];
    const recorded = this.host.rolloutCalls(this.turn, this.threadId);
    const events: HarnessEvent[] = [];
    for (const turnId of this.turns) {
      const calls = recorded.filter((c) => c.turnId === turnId);
      const booked = this.booked.get(turnId) ?? 0;
      for (const call of calls.slice(booked)) events.push({ type: 'usage', usage: call.usage });
      this.booked.set(turnId, Math.max(booked, calls.length));
    }
    return events;
  }

  /** One usage notification of our turn: booked unless the rollout already booked that call. */
  private notifiedUsage(turnId: string, breakdown: TokenBreakdown): HarnessEvent[] {
    const seen = (this.notified.get(turnId) ?? 0) + 1;
    this.notified.set(turnId, seen);
    if (seen <= (this.booked.get(turnId) ?? 0)) return [];
    this.booked.set(turnId, seen);
    return [{ type: 'usage', usage: this.host.usage(breakdown) }];
  }

  private async request(method: string, params: unknown, rpcId: number | string): Promise<CommandExecutionRequestApprovalResponse> {
    const request = this.permissionRequest(method, params, `codex-${String(rpcId)}`);
    if (!request) {
      // Nothing else is offered by this client (user input, MCP elicitation, dynamic tools): refuse, never hang.
      this.io.emit({ type: 'activity', description: `codex request ${method} refused` });
      throw new RpcError(methodNotFound, `durable-harness does not handle ${method}`);
    }
    // Codex asks before the call that asked is reported (its notification comes after the answer, measured), but
    // its rollout already has it: booked now, so a worker that dies during the wait loses nothing.
    this.idle = true;
    this.emitAll(this.fromRollout());
    const wire = await this.io.gate(request);
    return { decision: wire.allow ? 'accept' : 'decline' };
  }

  private permissionRequest(method: string, params: unknown, id: string): PermissionRequest | undefined {
    if (method === commandApprovalMethod) {
      const p = commandApproval.safeParse(params);
      const raw = p.success ? (p.data.command ?? '') : '';
      const actions = p.success ? (p.data.commandActions ?? []).map((a) => a.command).filter((c): c is string => typeof c === 'string') : [];
      const command = actions.length === 1 ? actions[0]! : unwrapShell(raw);
      return {
        id,
        tool: 'exec_command',
        kind: 'command',
        input: { command, ...(p.success && p.data.cwd ? { cwd: p.data.cwd } : {}) },
        title: command,
        command,
        options: { edit: 'emulated', denyMessage: false },
      };
    }
    if (method === fileApprovalMethod) {
      const p = fileApproval.safeParse(params);
      const changes = (p.success && p.data.itemId ? this.changes.get(p.data.itemId) : undefined) ?? [];
      const paths = changes.map((c) => c.path);
      return {
        id,
        tool: 'apply_patch',
        kind: 'edit',
        input: { changes: changes.map((c) => ({ path: c.path, kind: c.kind?.type ?? 'update', diff: c.diff ?? '' })) },
        title: paths.length > 0 ? `apply_patch ${changes.map((c) => `${c.kind?.type ?? 'update'} ${c.path}`).join(', ')}` : 'apply_patch',
        paths,
        options: { edit: 'emulated', denyMessage: false },
      };
    }
    return undefined;
  }

  private notification(method: string, params: unknown): void {
    switch (method) {
      case notifications.itemStarted:
      case notifications.itemCompleted: {
        const p = itemNotification.safeParse(params);
        const event = p.success ? this.item(p.data.item, method === notifications.itemCompleted) : undefined;
        if (event) this.io.emit(event);
        return;
      }
      case notifications.tokenUsage: {
        const p = usageNotification.safeParse(params);
        if (!p.success || !this.inTurn) return;
        const turnId = p.data.turnId ?? this.turns.at(-1);
        if (turnId && this.turns.includes(turnId)) {
          // A call ended: the model is not being called until its tools ran.
          this.idle = true;
          this.emitAll(this.notifiedUsage(turnId, p.data.tokenUsage.last));
        } else if (turnId) {
          // Not (yet) known as ours: kept until turn/start's result names it; a replayed turn's never is.
          this.early.set(turnId, [...(this.early.get(turnId) ?? []), p.data.tokenUsage.last]);
        }
        return;
      }
      case notifications.turnCompleted: {
        const p = turnCompleted.safeParse(params);
        this.completion?.(p.success ? p.data : 'malformed');
        return;
      }
      case notifications.error: {
        const p = errorNotification.safeParse(params);
        this.io.emit({ type: 'activity', description: `codex error: ${p.success ? (p.data.error?.message ?? '') : ''}` });
        return;
      }
      default:
        return;
    }
  }

  private item(it: z.infer<typeof item>, done: boolean): HarnessEvent | undefined {
    if (it.type === 'fileChange' && it.id && it.changes) this.changes.set(it.id, it.changes);
    // A tool runs from its start to its end; when it is done codex calls the model with the result.
    if (toolItems.has(it.type)) this.idle = !done;
    if (it.type === 'agentMessage') {
      if (!done || typeof it.text !== 'string') return undefined;
      this.text = it.text;
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
