/**
 * Claude Code adapter (driver class `ClaudeCode`), measured against `@anthropic-ai/claude-code` 2.1.197.
 *
 * One process per turn: `claude -p PROMPT --output-format stream-json --verbose --include-partial-messages
 * --permission-mode M [--model MODEL] [--append-system-prompt TEXT] [--resume ID --fork-session]` with stdin
 * ignored. Output lines: `system/init` (session_id, model, permissionMode), `system/api_retry`, `stream_event`
 * (the raw Messages API stream of each model call), `assistant` (message with text / tool_use blocks and the model
 * the vendor answered with), `user` (tool results), and one `result` that ends the turn (`is_error`, `result`
 * text, `usage`, `total_cost_usd`, `errors`). Every line carries `session_id`.
 *
 * Usage, per model call as it streams: a call's `message_start` carries its input and cache tokens (its
 * `input_tokens` EXCLUDES cache reads and writes), its `message_delta` the final `output_tokens`; the adapter
 * emits one usage event per call at `message_delta`. Anthropic counts thinking inside `output_tokens`, so
 * `reasoning` stays unknown (undefined) and the total is still exact. `result.usage` covers every call of the
 * turn: the adapter emits only what it adds beyond the calls already counted (normally nothing), with
 * `total_cost_usd` (the CLI's own estimate, per invocation). A turn that ends early (killed, timed out) still
 * counts the calls that finished, and the input of one in flight (its output unknown). The usage on `assistant`
 * lines is a streaming snapshot (output_tokens 1) and is ignored.
 * Resume: `--resume ID --fork-session` continues the session in a NEW session branched from it, leaving ID as it
 * was; a retried attempt forks ID again, so the prompt of a failed attempt is never fed twice
 * (`settings.forkSessions: false` resumes in place). An unknown id ends with a `result` whose `errors` say
 * "No conversation found with session ID" (exit 1).
 *
 * Two-way mode (when the turn's permission gate can deny or ask): `-p --input-format stream-json
 * --permission-mode default --permission-prompt-tool stdio` (with the same `--include-partial-messages`, resume
 * and fork flags), the prompt as a `user` line on stdin after an `initialize` control request, stdin kept open.
 * Before a tool that needs permission (edits, Bash; not the read-only tools) claude sends `control_request`
 * `can_use_tool` (`tool_name`, `input`, `tool_use_id`) and waits; the answer is a `control_response`
 * `{behavior: "allow", updatedInput}` (edits are native) or `{behavior: "deny", message}` (the model sees the
 * message and the turn goes on). Output is otherwise the same stream-json as the one-way mode, ending with
 * `result`; closing stdin then ends the process.
 */
import { z } from 'zod';
import type { DriverCommand, DriverTurn, HarnessDriver, LineIo, LineMapper, Mapped } from './driver.js';
import { cliCapabilities, driverHome, jsonLines, numberSetting, resumeFailed, resumeFailedOnExit, stringSetting } from './kit.js';
import { addUsage, noUsage, subtractUsage, totalTokens, usageKnown, usageOf } from '../contracts/usage.js';
import type { PermissionRequest } from '../permissions/types.js';
import type { HarnessEvent, PermissionPosture, PermissionReport, Usage } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const claudeCodeDriverClass = 'ClaudeCode';

/** Environment that keeps Claude Code quiet and offline apart from the model API. */
export const claudeQuietEnv: Readonly<Record<string, string>> = {
  DISABLE_TELEMETRY: '1',
  DISABLE_ERROR_REPORTING: '1',
  DISABLE_AUTOUPDATER: '1',
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
};

const permissionModes = { strict: 'default', auto: 'acceptEdits', dangerous: 'bypassPermissions' } as const satisfies Record<PermissionPosture, string>;

const usageSchema = z.object({
  input_tokens: z.number().nullish(),
  output_tokens: z.number().nullish(),
  cache_read_input_tokens: z.number().nullish(),
  cache_creation_input_tokens: z.number().nullish(),
});
const initLine = z.object({
  type: z.literal('system'),
  subtype: z.literal('init'),
  session_id: z.string(),
  model: z.string().nullish(),
  permissionMode: z.string().nullish(),
});
const retryLine = z.object({
  type: z.literal('system'),
  subtype: z.literal('api_retry'),
  attempt: z.number().nullish(),
  max_retries: z.number().nullish(),
  error_status: z.number().nullish(),
  error: z.string().nullish(),
});
const contentBlock = z.union([
  z.object({ type: z.literal('text'), text: z.string() }),
  z.object({ type: z.literal('tool_use'), name: z.string(), input: z.unknown().nullish() }),
  z.object({ type: z.string() }),
]);
const assistantLine = z.object({
  type: z.literal('assistant'),
  session_id: z.string().nullish(),
  parent_tool_use_id: z.string().nullish(),
  message: z.object({ id: z.string().nullish(), model: z.string().nullish(), content: z.array(contentBlock).nullish(), usage: usageSchema.nullish() }),
});
const statusLine = z.object({ type: z.literal('system'), subtype: z.literal('status'), status: z.string().nullish() });
const userLine = z.object({ type: z.literal('user'), session_id: z.string().nullish() });
const resultLine = z.object({
  type: z.literal('result'),
  subtype: z.string().nullish(),
  is_error: z.boolean().nullish(),
  api_error_status: z.number().nullish(),
  result: z.string().nullish(),
  session_id: z.string().nullish(),
  total_cost_usd: z.number().nullish(),
  usage: usageSchema.nullish(),
  errors: z.array(z.string()).nullish(),
  permission_denials: z.array(z.unknown()).nullish(),
});
/** `--include-partial-messages`: the Messages API stream events of each model call (only usage is read). */
const streamEventLine = z.object({
  type: z.literal('stream_event'),
  parent_tool_use_id: z.string().nullish(),
  event: z.union([
    z.object({ type: z.literal('message_start'), message: z.object({ id: z.string().nullish(), usage: usageSchema.nullish() }) }),
    z.object({ type: z.literal('message_delta'), usage: z.object({ output_tokens: z.number().nullish() }).nullish() }),
    z.object({ type: z.string() }),
  ]),
});
const controlRequestLine = z.object({
  type: z.literal('control_request'),
  request_id: z.string(),
  request: z.object({ subtype: z.string(), tool_name: z.string().nullish(), input: z.unknown().nullish(), tool_use_id: z.string().nullish(), description: z.string().nullish() }).loose(),
});
const otherLine = z.object({ type: z.string(), subtype: z.string().nullish() });
/** Every line Claude Code prints in stream-json mode; unknown types fall through to the catch-all. */
export const claudeLine = z.union([initLine, retryLine, statusLine, streamEventLine, assistantLine, userLine, resultLine, controlRequestLine, otherLine]);
export type ClaudeLine = z.infer<typeof claudeLine>;

/**
 * `result.usage` (or one call's usage) normalised: Claude's `input_tokens` already excludes cached tokens; its
 * `output_tokens` include thinking, so `reasoning` is left unknown. A field Claude leaves out stays unknown.
 */
export function claudeUsage(u: z.infer<typeof usageSchema>): Usage {
  return usageOf({ input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens, cacheWrite: u.cache_creation_input_tokens });
}

/** `ANTHROPIC_BASE_URL` is the host root: Claude appends `/v1/messages` itself. */
export function claudeBaseUrl(url: string): string {
  return url.replace(/\/+$/, '').replace(/\/v1$/, '');
}

const noConversation = /No conversation found with session ID/i;

const editTools = new Set(['Write', 'Edit', 'MultiEdit', 'NotebookEdit']);
const readTools = new Set(['Read', 'Glob', 'Grep', 'LS', 'NotebookRead']);

/** A `can_use_tool` request in the runtime's vocabulary. */
export function claudePermissionRequest(requestId: string, tool: string, input: unknown, description?: string | null): PermissionRequest {
  const fields = (input ?? {}) as Record<string, unknown>;
  const text = (key: string): string | undefined => (typeof fields[key] === 'string' ? (fields[key] as string) : undefined);
  const file = text('file_path') ?? text('notebook_path') ?? text('path');
  const kind = tool === 'Bash' ? 'command' : editTools.has(tool) ? 'edit' : readTools.has(tool) ? 'read' : 'other';
  const command = kind === 'command' ? text('command') : undefined;
  return {
    id: requestId,
    tool,
    kind,
    input: input ?? {},
    title: command ?? (file !== undefined ? `${tool} ${file}` : (description ?? tool)),
    ...(command !== undefined ? { command } : {}),
    ...(file !== undefined ? { paths: [file] } : {}),
    options: { edit: 'native', denyMessage: true },
  };
}

interface Scratch {
  sessionId?: string;
  model?: string;
  /** Input and cache tokens of the model call in flight (from its `message_start`). */
  call?: Usage;
  /** The call in flight's input side is booked already (at a permission request): its `message_delta` adds the output. */
  inputBooked?: boolean;
  /** Claude said it is requesting a model call (`system/status`) and no answer has begun. */
  requesting?: boolean;
  /** Ids of this turn's streamed calls: an `assistant` message with another id is a non-streamed (fallback) call. */
  streamed?: string[];
  /** Usage of the calls already emitted this turn. */
  counted?: Usage;
}

/**
 * A call's input side as an incremental usage event: its output is booked by a later event (0 here means "none yet"),
 * or, when it never comes, by a call of unknown usage — so the sum is exact or the cost blind, never silently short.
 */
function inputSide(call: Usage): Usage {
  return { ...call, output: 0 };
}

/** A call's output as the event that completes its input side: nothing more of its input. */
function outputSide(call: Usage, output: number | null | undefined): Usage {
  const zero = (v: number | undefined) => (v === undefined ? undefined : 0);
  return usageOf({ input: zero(call.input), cacheRead: zero(call.cacheRead), cacheWrite: zero(call.cacheWrite), output });
}

/** A usage event that also goes into the turn's `counted` (what `result.usage` is compared with). */
function counted(scratch: Scratch, usage: Usage): HarnessEvent {
  scratch.counted = addUsage(scratch.counted ?? noUsage, usage);
  return { type: 'usage', usage };
}

/**
 * The streamed call in flight as far as it is known when it cannot finish (cut, superseded, killed): its input side,
 * if not booked yet, and a call of unknown usage for its output, which nobody will ever report. With `ended` (the
 * turn is over) a request no answer began for counts the same: it may have been served.
 */
function cutCall(scratch: Scratch, ended = false): HarnessEvent[] {
  const call = scratch.call;
  const events: HarnessEvent[] = [];
  if (call && !scratch.inputBooked && usageKnown(call)) events.push(counted(scratch, inputSide(call)));
  if (call || (ended && scratch.requesting)) events.push({ type: 'usage', usage: noUsage });
  scratch.call = undefined;
  scratch.inputBooked = false;
  if (ended) scratch.requesting = false;
  return events;
}

const names = { label: 'Claude Code' };

function permissions(posture: PermissionPosture): PermissionReport {
  switch (posture) {
    case 'strict':
      return {
        posture,
        enforced: true,
        note:
          'Two-way mode (--permission-prompt-tool stdio): every edit and shell command is decided by the permission gate ' +
          '(the policy, then an operator) before it runs, edited input included; read-only tools run unasked. Without a ' +
          'gate: --permission-mode default, where every tool that would ask is DENIED.',
      };
    case 'auto':
      return {
        posture,
        enforced: true,
        note: '--permission-mode acceptEdits: file edits in the workspace are accepted; shell commands that would ask are denied. With permission rules: the two-way mode, as for strict.',
      };
    case 'dangerous':
      return {
        posture,
        enforced: true,
        note: '--dangerously-skip-permissions: every tool runs unasked (IS_SANDBOX=1 so it is accepted as root); only the sandbox limits it.',
      };
  }
}

function command(turn: DriverTurn): DriverCommand {
  // CLAUDE_CONFIG_DIR holds its settings, sessions (for --resume) and caches; it creates the directory itself.
  const home = driverHome(turn, 'claude');
  // Two-way: the prompt goes on stdin (after the initialize request), so it never enters argv either.
  const argv = turn.twoWay
    ? [turn.executable, ...turn.baseArgs, '-p', '--input-format', 'stream-json', '--output-format', 'stream-json', '--verbose', '--include-partial-messages']
    : [turn.executable, ...turn.baseArgs, '-p', turn.prompt, '--output-format', 'stream-json', '--verbose', '--include-partial-messages'];
  if (turn.twoWay) argv.push('--permission-mode', 'default', '--permission-prompt-tool', 'stdio');
  else if (turn.posture === 'dangerous') argv.push('--dangerously-skip-permissions');
  else argv.push('--permission-mode', permissionModes[turn.posture]);
  if (turn.model) argv.push('--model', turn.model);
  // Every turn: the system prompt is per invocation, it is not stored with the session.
  if (turn.systemPrompt !== undefined) argv.push('--append-system-prompt', turn.systemPrompt);
  // Only the MCP servers durable-harness names: never a repository's .mcp.json or a settings file's servers.
  argv.push('--strict-mcp-config');
  if (turn.mcp) {
    // The token stays in the environment: claude expands ${VAR} in the config's headers itself.
    const servers = { mcpServers: { [turn.mcp.name]: { type: 'http', url: turn.mcp.url, headers: { Authorization: `Bearer \${${turn.mcp.tokenEnv}}` } } } };
    // The loopback only reads: its tools run unasked (the permission gate is for tools that act).
    argv.push(`--mcp-config=${JSON.stringify(servers)}`, `--allowedTools=mcp__${turn.mcp.name}`);
  }
  if (turn.resumeSessionId) argv.push('--resume', turn.resumeSessionId, ...(turn.fork ? ['--fork-session'] : []));

  // Not CLAUDE_CODE_SUBPROCESS_ENV_SCRUB: claude 2.x then refuses to start without bubblewrap ("bubblewrap is required
  // for subprocess env scrubbing"), which a locked-down container cannot run. Behind the egress gateway its shell
  // commands see the run's placeholder, never the key (docs/network.md).
  const env: Record<string, string> = { ...claudeQuietEnv, CLAUDE_CONFIG_DIR: home.path };
  if (turn.baseUrl) env.ANTHROPIC_BASE_URL = claudeBaseUrl(turn.baseUrl);
  // The key reaches the CLI only as ANTHROPIC_API_KEY; a catalog may name another variable for it.
  const apiKeyEnv = stringSetting(turn, 'apiKeyEnv');
  if (apiKeyEnv && apiKeyEnv !== 'ANTHROPIC_API_KEY' && turn.env[apiKeyEnv] !== undefined) env.ANTHROPIC_API_KEY = turn.env[apiKeyEnv];
  // Claude retries even a 401 ten times with backoff (minutes); Temporal owns retries, so a catalog can bound it.
  const maxRetries = numberSetting(turn, 'maxRetries');
  if (maxRetries !== undefined) env.CLAUDE_CODE_MAX_RETRIES = String(maxRetries);
  // Claude refuses --dangerously-skip-permissions as root unless told it is in a sandbox.
  if (turn.posture === 'dangerous' && !turn.twoWay) env.IS_SANDBOX = '1';
  if (!turn.twoWay) return { argv, env };
  const stdin = [
    { type: 'control_request', request_id: 'durable-harness-init', request: { subtype: 'initialize' } },
    { type: 'user', message: { role: 'user', content: turn.prompt }, parent_tool_use_id: null, session_id: '' },
  ];
  return { argv, env, stdin: stdin.map((l) => `${JSON.stringify(l)}\n`).join(''), keepStdinOpen: true };
}

/** One turn's mapper: the stream-json lines of both modes, per-call usage, and (two-way) `can_use_tool` requests. */
function claudeMapper(turn: DriverTurn, io: LineIo): LineMapper {
  const scratch: Scratch = {};

  /** Per-call usage: remember `message_start`'s input side, emit the call at `message_delta` with its output. */
  const streamEvent = (value: z.infer<typeof streamEventLine>): HarnessEvent[] | undefined => {
    const event = value.event;
    if (event.type === 'message_start' && 'message' in event) {
      const cut = cutCall(scratch);
      scratch.requesting = false;
      scratch.call = event.message.usage ? usageOf({ ...claudeUsage(event.message.usage), output: undefined }) : noUsage;
      if (event.message.id) (scratch.streamed ??= []).push(event.message.id);
      return cut;
    }
    if (event.type === 'message_delta' && 'usage' in event && scratch.call) {
      // After a permission request only the output is left to book: the input side was booked then.
      const usage = scratch.inputBooked ? outputSide(scratch.call, event.usage?.output_tokens) : usageOf({ ...scratch.call, output: event.usage?.output_tokens });
      scratch.call = undefined;
      scratch.inputBooked = false;
      return [counted(scratch, usage)];
    }
    return undefined;
  };

  const controlRequest = (value: z.infer<typeof controlRequestLine>): Mapped => {
    const { request } = value;
    if (request.subtype === 'can_use_tool' && request.tool_name) {
      // Claude holds the asking call's `message_delta` until it has the answer (measured): its input side is booked
      // now, so a cancel or a dead worker during the wait does not lose the call; the output follows the answer.
      const events: HarnessEvent[] = [];
      if (scratch.call && !scratch.inputBooked && usageKnown(scratch.call)) {
        events.push(counted(scratch, inputSide(scratch.call)));
        scratch.inputBooked = true;
      }
      return [...events, { type: 'permission-request', ...claudePermissionRequest(value.request_id, request.tool_name, request.input, request.description) }];
    }
    // Nothing else was registered (no hooks, no SDK MCP servers): say so rather than leave claude waiting.
    io.send(JSON.stringify({ type: 'control_response', response: { subtype: 'error', request_id: value.request_id, error: `durable-harness does not handle ${request.subtype}` } }));
    return { type: 'activity', description: `claude control request ${request.subtype} refused` };
  };

  const assistant = (value: z.infer<typeof assistantLine>): HarnessEvent[] => {
    const events: HarnessEvent[] = [];
    const { id, usage } = value.message;
    // A message no stream announced is a non-streamed call (claude's fallback after a cut stream, measured): its
    // usage here is the call's own, final (a streamed call's `assistant` lines carry a snapshot, ignored).
    if (id && usage && value.message.model !== '<synthetic>' && !scratch.streamed?.includes(id)) {
      events.push(...cutCall(scratch), counted(scratch, claudeUsage(usage)));
      (scratch.streamed ??= []).push(id);
    }
    // The answer began (or, `<synthetic>`, the CLI made up an error message: the request failed, nothing served).
    if (!value.parent_tool_use_id) scratch.requesting = false;
    // The model the vendor says answered; "<synthetic>" marks messages the CLI made up itself (errors).
    const model = value.message.model;
    const sessionId = value.session_id ?? scratch.sessionId;
    if (model && model !== '<synthetic>' && model !== scratch.model && sessionId && !value.parent_tool_use_id) {
      scratch.model = model;
      events.push({ type: 'session', sessionId, model });
    }
    for (const block of value.message.content ?? []) {
      if (block.type === 'text' && 'text' in block) events.push({ type: 'text', text: block.text });
      else if (block.type === 'tool_use' && 'name' in block) events.push({ type: 'activity', description: `${block.name} ${JSON.stringify(block.input ?? {})}` });
    }
    return events;
  };

  const result = (value: z.infer<typeof resultLine>): HarnessEvent[] => {
    const errors = value.errors ?? [];
    if (turn.resumeSessionId !== undefined && errors.some((e) => noConversation.test(e))) {
      return [resumeFailed(names, turn, { reason: errors.join('; ') })];
    }
    // A call still open at the end was cut (it never finished streaming).
    const events: HarnessEvent[] = cutCall(scratch, true);
    // The result covers every call of the turn: count only what the per-call events did not already count.
    // The event also carries the invocation's cost, so it is emitted whenever there is a cost or uncounted tokens.
    const rest = value.usage ? subtractUsage(claudeUsage(value.usage), scratch.counted ?? noUsage) : noUsage;
    const cost = value.total_cost_usd ?? undefined;
    if (cost !== undefined || totalTokens(rest) > 0 || (scratch.counted === undefined && usageKnown(rest))) {
      events.push({ type: 'usage', usage: rest, ...(cost !== undefined ? { costUsd: cost } : {}) });
    }
    if (value.is_error) {
      const detail = errors.length > 0 ? errors.join('; ') : (value.result ?? `result subtype ${value.subtype ?? 'unknown'}`);
      const status = value.api_error_status ? ` (HTTP ${value.api_error_status})` : '';
      events.push({ type: 'session-error', code: value.api_error_status ? 'vendor-error' : 'process-exit', message: `Claude Code ended the turn with an error${status}: ${detail}` });
    } else {
      events.push({ type: 'turn-complete', text: value.result ?? '' });
    }
    return events;
  };

  const system = (value: z.infer<typeof claudeLine>, line: string): Mapped => {
    const subtype = 'subtype' in value ? value.subtype : undefined;
    if (subtype === 'init') {
      const v = value as z.infer<typeof initLine>;
      scratch.sessionId = v.session_id;
      scratch.model = v.model ?? undefined;
      return { type: 'session', sessionId: v.session_id, model: v.model ?? undefined };
    }
    if (subtype === 'status') {
      // A model call is requested: a call still open was cut (a retry or a fallback follows).
      if ((value as z.infer<typeof statusLine>).status !== 'requesting') return undefined;
      const cut = cutCall(scratch);
      scratch.requesting = true;
      return cut;
    }
    if (subtype === 'api_retry') {
      const v = value as z.infer<typeof retryLine>;
      return { type: 'activity', description: `claude retries the model API (attempt ${v.attempt ?? '?'} of ${v.max_retries ?? '?'}): ${v.error_status ?? ''} ${v.error ?? ''}`.trim() };
    }
    return { type: 'unknown', raw: line };
  };

  return {
    line: jsonLines(claudeLine, {
      system,
      stream_event: (value) => streamEvent(value as z.infer<typeof streamEventLine>),
      assistant: (value) => assistant(value as z.infer<typeof assistantLine>),
      user: () => ({ type: 'activity', description: 'tool result' }),
      result: (value) => result(value as z.infer<typeof resultLine>),
      control_request: (value) => controlRequest(value as z.infer<typeof controlRequestLine>),
      control_response: () => undefined, // the answer to our `initialize`
    }),
    answer: (request, answer) => {
      const response = answer.allow ? { behavior: 'allow', updatedInput: answer.editedInput ?? request.input } : { behavior: 'deny', message: answer.message ?? 'Denied.' };
      io.send(JSON.stringify({ type: 'control_response', response: { subtype: 'success', request_id: request.id, response } }));
    },
    exit: (code, stderrTail) => resumeFailedOnExit(names, noConversation, turn, code, stderrTail),
    /** The call in flight when the turn ended early: its input side is known, its output is not (unknown usage). */
    unreported: () => cutCall(scratch, true),
    /** A permission wait holds the asking call's `message_delta` back (measured): its output is still to come. */
    callOpen: () => scratch.call !== undefined,
  };
}

/** The Claude Code driver (`claude -p`). */
export const claudeCode: HarnessDriver = {
  specificationVersion: 'v2',
  driverClass: claudeCodeDriverClass,
  // Permission hooks: two-way mode `--permission-prompt-tool stdio` (test/e2e/permissions-live.test.ts proves it on the real binary).
  // McpClient: test/e2e/loopback-live.test.ts proves the real binary lists and calls the loopback's tools.
  capabilities: cliCapabilities({ sessionFork: true, mcpClient: true }),
  vendor: { api: 'anthropic-messages', baseUrl: { env: 'ANTHROPIC_BASE_URL' }, apiKey: { env: 'ANTHROPIC_API_KEY' } },
  mcp: { flag: '--mcp-config' },
  permissions,
  command,
  session: () => ({ kind: 'one-way', start: claudeMapper }),
};
