/**
 * Codex CLI adapter (driver class `Codex`), measured against `@openai/codex` 0.171.0.
 *
 * One process per turn, stdin ignored (codex reads a non-TTY stdin as extra prompt):
 *   turn 1:  `codex exec --json --skip-git-repo-check -c sandbox_mode=… -c approval_policy="never"
 *             [-m MODEL] [-c developer_instructions=…] PROMPT`
 *   resumed: `codex exec fork <same options> THREAD_ID PROMPT`: a NEW thread branched from THREAD_ID, which stays as
 *             it was, so a retried attempt forks the same state again instead of feeding its prompt twice
 *             (`settings.forkSessions: false` uses `codex exec resume`, which continues THREAD_ID in place). Neither
 *             has a `--sandbox` flag, hence `-c sandbox_mode=…` for all.
 * Config lives in `CODEX_HOME=<workspace>/.home/codex/config.toml`: a custom provider (`wire_api="responses"`,
 * `base_url` ending in `/v1`, `env_key` naming the variable with the key), update checks, analytics, otel and the
 * plugin marketplace (which resolves github.com at start) off.
 * A CODEX_HOME under /tmp breaks codex's sandbox helper; the workspace must not be under /tmp either.
 *
 * Output lines (see openai/codex `sdk/typescript/src/events.ts`): `thread.started` (thread_id), `turn.started`,
 * `item.started|updated|completed` (agent_message, reasoning, command_execution, file_change, mcp_tool_call,
 * web_search, todo_list, error), `turn.completed` (usage) or `turn.failed` (error), and top-level `error`.
 *
 * Usage: `input_tokens` INCLUDES cached tokens (`cached_input_tokens`), so input = input_tokens − cached
 * (− cache_write_input_tokens, which the Responses API never reports here); `output_tokens` INCLUDES
 * `reasoning_output_tokens`, so output = output_tokens − reasoning. On a resumed or forked thread the usage is
 * the THREAD's running total, not the turn's (measured: turn 2 reported turn 1 + turn 2; a fork starts from its
 * parent's total), so the adapter keeps the last total per thread in the run's state (the ledger, through
 * `turn.state`; never in the workspace, where the harness could lower it) and reports the difference.
 * A failed turn (`turn.failed`, a crash, a kill) prints no usage, but codex's rollout file
 * (`$CODEX_HOME/sessions/…/rollout-…-<thread>.jsonl`) has a `token_count` event per model call: the adapter
 * reads the thread's last total there, so the calls a failed attempt made are still counted.
 * Model: codex does not print it in the JSONL (only in its rollout file), so no model is reported.
 * No cost is reported.
 *
 * Two-way mode (when the turn's permission gate can deny or ask): `codex app-server`, see two-way/codex-app-server.ts.
 * There usage comes per model call (`thread/tokenUsage/updated` → `last`), and the thread's model is reported.
 */
import { z } from 'zod';
import { codexAppServerSession, type TokenBreakdown } from './two-way/codex-app-server.js';
import type { DriverCommand, DriverTurn, HarnessDriver, LineMapper } from './driver.js';
import { harnessHome, homePath, listHomeDir, readHomeFile, type HarnessHome } from './harness-home.js';
import { below, cliCapabilities, driverHome, jsonLines, parseJsonLine, resumeFailed, resumeFailedOnExit, stringSetting } from './kit.js';
import { noUsage, subtractUsage, usageFromJson, usageOf } from '../contracts/usage.js';
import type { HarnessEvent, PermissionPosture, PermissionReport, Usage } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const codexDriverClass = 'Codex';

const sandboxModes = { strict: 'read-only', auto: 'workspace-write', dangerous: 'danger-full-access' } as const satisfies Record<PermissionPosture, string>;

const usageSchema = z.object({
  input_tokens: z.number().nullish(),
  cached_input_tokens: z.number().nullish(),
  cache_write_input_tokens: z.number().nullish(),
  output_tokens: z.number().nullish(),
  reasoning_output_tokens: z.number().nullish(),
});
const item = z.union([
  z.object({ id: z.string().nullish(), type: z.literal('agent_message'), text: z.string() }),
  z.object({ id: z.string().nullish(), type: z.literal('reasoning'), text: z.string().nullish() }),
  z.object({
    id: z.string().nullish(),
    type: z.literal('command_execution'),
    command: z.string(),
    exit_code: z.number().nullish(),
    status: z.string().nullish(),
  }),
  z.object({ id: z.string().nullish(), type: z.literal('file_change'), changes: z.array(z.object({ path: z.string(), kind: z.string().nullish() })).nullish(), status: z.string().nullish() }),
  z.object({ id: z.string().nullish(), type: z.literal('mcp_tool_call'), server: z.string().nullish(), tool: z.string().nullish(), status: z.string().nullish() }),
  z.object({ id: z.string().nullish(), type: z.literal('web_search'), query: z.string().nullish() }),
  z.object({ id: z.string().nullish(), type: z.literal('error'), message: z.string() }),
  z.object({ id: z.string().nullish(), type: z.string() }),
]);
const threadStarted = z.object({ type: z.literal('thread.started'), thread_id: z.string() });
const itemLine = z.object({ type: z.enum(['item.started', 'item.updated', 'item.completed']), item });
const turnCompleted = z.object({ type: z.literal('turn.completed'), usage: usageSchema.nullish() });
const turnFailed = z.object({ type: z.literal('turn.failed'), error: z.object({ message: z.string().nullish() }).nullish() });
const errorLine = z.object({ type: z.literal('error'), message: z.string().nullish() });
const otherLine = z.object({ type: z.string() });
/** Every line `codex exec --json` prints; unknown types fall through to the catch-all. */
export const codexLine = z.union([threadStarted, itemLine, turnCompleted, turnFailed, errorLine, otherLine]);
export type CodexLine = z.infer<typeof codexLine>;

/** Codex's usage normalised: its `input_tokens` include the cached ones, its `output_tokens` the reasoning ones. */
export function codexUsage(u: z.infer<typeof usageSchema>): Usage {
  const cached = u.cached_input_tokens ?? 0;
  const written = u.cache_write_input_tokens ?? 0;
  const reasoning = u.reasoning_output_tokens ?? undefined;
  return usageOf({
    input: u.input_tokens == null ? undefined : Math.max(0, u.input_tokens - cached - written),
    output: u.output_tokens == null ? undefined : Math.max(0, u.output_tokens - (reasoning ?? 0)),
    cacheRead: u.cached_input_tokens,
    cacheWrite: u.cache_write_input_tokens,
    reasoning,
  });
}

/** A rollout line with the thread's running usage total (one per model call), written once the call's tools ran. */
const tokenCountLine = z.object({
  type: z.literal('event_msg'),
  payload: z.object({ type: z.literal('token_count'), info: z.object({ total_token_usage: usageSchema.nullish() }).nullish() }),
});

/**
 * A rollout line codex writes the moment a model response completes — before the tools it asked for run or ask for
 * approval (measured on 0.171.0: a `token_count` line comes only after the approval) — with that response's usage,
 * its turn and the thread's running total.
 */
const usageRecordLine = z.object({
  type: z.literal('token_usage_record'),
  payload: z.object({ turn_id: z.string().nullish(), response_id: z.string().nullish(), usage: usageSchema.nullish(), thread_token_usage: usageSchema.nullish() }),
});

/** One model call as the rollout recorded it. */
export interface RolloutCall {
  readonly turnId: string | undefined;
  readonly usage: Usage;
}

/** What a thread's rollout file says about usage: the last running total and every recorded call, in order. */
export function readRolloutUsage(text: string): { total: Usage | undefined; calls: RolloutCall[] } {
  let total: Usage | undefined;
  const calls: RolloutCall[] = [];
  for (const line of text.split('\n')) {
    if (line.includes('"token_usage_record"')) {
      const parsed = usageRecordLine.safeParse(parseJsonLine(line));
      if (!parsed.success) continue;
      const { turn_id, usage, thread_token_usage } = parsed.data.payload;
      if (usage) calls.push({ turnId: turn_id ?? undefined, usage: codexUsage(usage) });
      if (thread_token_usage) total = codexUsage(thread_token_usage);
    } else if (line.includes('"token_count"')) {
      const parsed = tokenCountLine.safeParse(parseJsonLine(line));
      const t = parsed.success ? parsed.data.payload.info?.total_token_usage : undefined;
      if (t) total = codexUsage(t);
    }
  }
  return { total, calls };
}

/** Codex's provider `base_url` includes `/v1` (it appends `/responses`). */
export function codexBaseUrl(url: string): string {
  const trimmed = url.replace(/\/+$/, '');
  return trimmed.endsWith('/v1') ? trimmed : `${trimmed}/v1`;
}

/** A TOML basic string. JSON string escaping is valid TOML for the characters JSON escapes. */
const tomlString = (value: string): string => JSON.stringify(value);

/** `config.toml` for a per-run CODEX_HOME: one custom provider, nothing phoning home. */
export function codexConfigToml(options: { baseUrl: string; envKey: string; model?: string; mcp?: DriverTurn['mcp'] }): string {
  return [
    'model_provider = "durable"',
    ...(options.model ? [`model = ${tomlString(options.model)}`] : []),
    'check_for_update_on_startup = false',
    '',
    '[model_providers.durable]',
    'name = "durable-harness"',
    `base_url = ${tomlString(codexBaseUrl(options.baseUrl))}`,
    `env_key = ${tomlString(options.envKey)}`,
    'wire_api = "responses"',
    // Temporal owns retries: a failed request ends the turn instead of backing off inside it.
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
    // The shell commands codex runs get only the core variables (PATH, HOME, ...), never its key: defence in depth.
    '[shell_environment_policy]',
    'inherit = "core"',
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[otel]',
    'exporter = "none"',
    '',
    // Measured with strace: the `plugins` feature resolves github.com / api.github.com at start (marketplace sync).
    '[features]',
    'plugins = false',
    'remote_plugin = false',
    'apps = false',
    '',
    // The run's MCP loopback: codex reads the bearer token from the variable (never written here).
    ...(options.mcp
      ? [`[mcp_servers.${tomlString(options.mcp.name)}]`, `url = ${tomlString(options.mcp.url)}`, `bearer_token_env_var = ${tomlString(options.mcp.tokenEnv)}`, 'startup_timeout_sec = 10', 'tool_timeout_sec = 30', '']
      : []),
  ].join('\n');
}

const unknownThread = /no rollout found for thread id|thread not found|no session found/i;

interface Scratch {
  threadId?: string;
  /** Text of the last agent message: the envelope is the final one. */
  text?: string;
  /** The turn's usage was reported (from `turn.completed` or recovered from the rollout). */
  counted?: boolean;
  /** A tool (command, file change, MCP call) is running: codex is not calling the model meanwhile. */
  toolRunning?: boolean;
}

const toolItems = new Set(['command_execution', 'file_change', 'mcp_tool_call']);

const names = { label: 'Codex', noun: 'thread' };

function permissions(posture: PermissionPosture): PermissionReport {
  const mode = sandboxModes[posture];
  const note =
    posture === 'strict'
      ? 'Two-way mode (codex app-server, approvalPolicy untrusted, sandbox workspace-write): every command codex does not ' +
        'consider safe and every file change is decided by the permission gate (the policy, then an operator) before it ' +
        "runs; codex's own safe read-only commands run unasked; an edited command is emulated (refused, the model is told, " +
        `exactly the edit is pre-approved). Without a gate: sandbox_mode=${mode}, approval_policy=never, writes fail.`
      : posture === 'auto'
        ? `sandbox_mode=${mode}, approval_policy=never: commands may write inside the workspace only; nothing is asked. With permission rules: the two-way mode, as for strict.`
        : `sandbox_mode=${mode}, approval_policy=never: codex's own sandbox is off; only the outer sandbox limits it.`;
  return { posture, enforced: true, note };
}

function command(turn: DriverTurn): DriverCommand {
  const env = { CODEX_HOME: driverHome(turn, 'codex').path };
  if (turn.twoWay) return { argv: [turn.executable, ...turn.baseArgs, 'app-server'], env, keepStdinOpen: true };
  const resume = turn.resumeSessionId;
  const options = ['--json', '--skip-git-repo-check', '-c', `sandbox_mode=${tomlString(sandboxModes[turn.posture])}`, '-c', 'approval_policy="never"'];
  if (turn.model) options.push('-m', turn.model);
  // Every turn: a resumed thread keeps its first developer message, but the config value must not vanish.
  if (turn.systemPrompt !== undefined) options.push('-c', `developer_instructions=${tomlString(turn.systemPrompt)}`);
  const head = [turn.executable, ...turn.baseArgs, 'exec'];
  // `--` keeps a prompt that starts with "-" from being read as a flag.
  const argv = resume ? [...head, turn.fork ? 'fork' : 'resume', ...options, '--', resume, turn.prompt] : [...head, ...options, '--', turn.prompt];
  return { argv, env };
}

/** The thread totals of the run's state, and how this turn's share of a running total is measured and remembered. */
async function threadTotals(turn: DriverTurn): Promise<(threadId: string | undefined, total: Usage) => Promise<Usage>> {
  let totals = usageTotals(await turn.state.get(usageTotalsKey).catch(() => undefined));
  /**
   * The turn's share of a thread's running total, remembered for the next turn. A fork's first total includes its
   * parent's, so a thread seen for the first time is measured against the session it forked.
   */
  return async (threadId, total) => {
    if (!threadId) return total;
    const before = totals[threadId] ?? (turn.fork && turn.resumeSessionId ? totals[turn.resumeSessionId] : undefined);
    totals = { ...totals, [threadId]: total };
    // A lost write makes the next turn count this one again (too much, never too little).
    await turn.state.set(usageTotalsKey, totals).catch(() => undefined);
    return before ? subtractUsage(total, before) : total;
  };
}

/** The usage in the thread's rollout file (its last running total and its recorded calls), if codex wrote one. */
function rollout(turn: DriverTurn, threadId: string): ReturnType<typeof readRolloutUsage> | undefined {
  const home = harnessHome(turn, 'codex');
  const file = home && findRollout(homePath(home, 'sessions'), threadId);
  if (!file) return undefined;
  try {
    return readRolloutUsage(readHomeFile(file) ?? '');
  } catch {
    return undefined;
  }
}

/** One `codex exec --json` turn. */
async function execMapper(turn: DriverTurn): Promise<LineMapper> {
  const scratch: Scratch = {};
  const sinceLastTotal = await threadTotals(turn);

  /**
   * A turn that failed, crashed or was killed printed no usage: the thread's rollout file has the running total
   * after each model call. Reports what this turn added to it, and a call of unknown usage when the turn was cut off
   * while codex was calling the model (not running a tool): that call's tokens are in no record. The two-way mode
   * counts per call instead (two-way/codex-app-server.ts), never from the thread's total: that would count its calls twice.
   */
  const unreported = async (): Promise<HarnessEvent[]> => {
    if (scratch.counted || !scratch.threadId) return [];
    scratch.counted = true;
    const total = rollout(turn, scratch.threadId)?.total;
    const events: HarnessEvent[] = total ? [{ type: 'usage', usage: await sinceLastTotal(scratch.threadId, total) }] : [];
    if (!scratch.toolRunning) events.push({ type: 'usage', usage: noUsage });
    return events;
  };

  const item = (value: z.infer<typeof itemLine>): HarnessEvent | undefined => {
    const it = value.item;
    const done = value.type === 'item.completed';
    if (toolItems.has(it.type) && value.type !== 'item.updated') scratch.toolRunning = !done;
    if (it.type === 'agent_message' && 'text' in it && typeof it.text === 'string') {
      if (!done) return undefined;
      scratch.text = it.text;
      return { type: 'text', text: it.text };
    }
    if (it.type === 'command_execution' && 'command' in it) {
      const status = done ? ` → exit ${it.exit_code ?? '?'}` : '';
      return value.type === 'item.updated' ? undefined : { type: 'activity', description: `command: ${it.command}${status}` };
    }
    if (!done) return undefined;
    if (it.type === 'file_change' && 'changes' in it) return { type: 'activity', description: `file change: ${(it.changes ?? []).map((c) => `${c.kind ?? ''} ${c.path}`.trim()).join(', ')}` };
    if (it.type === 'mcp_tool_call' && 'tool' in it) return { type: 'activity', description: `mcp: ${it.server ?? ''}/${it.tool ?? ''}` };
    if (it.type === 'web_search' && 'query' in it) return { type: 'activity', description: `web search: ${it.query ?? ''}` };
    // An `error` item is a warning (e.g. unknown model metadata); the turn goes on.
    if (it.type === 'error' && 'message' in it) return { type: 'activity', description: `codex warning: ${it.message}` };
    if (it.type === 'reasoning') return { type: 'activity', description: 'reasoning' };
    return { type: 'activity', description: `codex item: ${it.type}` };
  };

  const completed = async (value: z.infer<typeof turnCompleted>): Promise<HarnessEvent[]> => {
    const events: HarnessEvent[] = [];
    if (value.usage) {
      scratch.counted = true;
      events.push({ type: 'usage', usage: await sinceLastTotal(scratch.threadId, codexUsage(value.usage)) });
    } else {
      events.push(...(await unreported()));
    }
    events.push({ type: 'turn-complete', text: scratch.text ?? '' });
    return events;
  };

  return {
    line: jsonLines(codexLine, {
      'thread.started': (value) => {
        const v = value as z.infer<typeof threadStarted>;
        scratch.threadId = v.thread_id;
        // Codex does not say which model answered (it is only in its rollout file): no model here, no guess.
        return { type: 'session', sessionId: v.thread_id };
      },
      'turn.started': () => {
        scratch.toolRunning = false;
        return undefined;
      },
      'item.started': (value) => item(value as z.infer<typeof itemLine>),
      'item.updated': (value) => item(value as z.infer<typeof itemLine>),
      'item.completed': (value) => item(value as z.infer<typeof itemLine>),
      'turn.completed': (value) => completed(value as z.infer<typeof turnCompleted>),
      'turn.failed': (value) => {
        const v = value as z.infer<typeof turnFailed>;
        // The call that failed is over: nothing is in flight.
        scratch.toolRunning = true;
        return unreported().then((events): HarnessEvent[] => [...events, { type: 'session-error', code: 'vendor-error', message: `Codex ended the turn with an error: ${v.error?.message ?? 'no message'}` }]);
      },
      // A top-level error precedes turn.failed; keep it as progress, the terminal comes with turn.failed.
      error: (value) => ({ type: 'activity', description: `codex error: ${(value as z.infer<typeof errorLine>).message ?? ''}` }),
    }),
    exit: (code, stderrTail) => resumeFailedOnExit(names, unknownThread, turn, code, stderrTail),
    unreported,
  };
}

/** The two-way mode: `codex app-server`, its usage per call (and, for a cut-off turn, from the rollout). */
const appServer = codexAppServerSession({
  resumeFailed: (turn, reason) => resumeFailed(names, turn, { reason }),
  rolloutCalls: (turn, threadId) => rollout(turn, threadId)?.calls ?? [],
  usage: (b: TokenBreakdown) =>
    codexUsage({
      input_tokens: b.inputTokens,
      cached_input_tokens: b.cachedInputTokens,
      cache_write_input_tokens: b.cacheWriteInputTokens,
      output_tokens: b.outputTokens,
      reasoning_output_tokens: b.reasoningOutputTokens,
    }),
  exit: (turn, code, stderrTail) => resumeFailedOnExit(names, unknownThread, turn, code, stderrTail),
});

/** The Codex CLI driver (`codex exec --json`; two-way: `codex app-server`). */
export const codex: HarnessDriver = {
  specificationVersion: 'v2',
  driverClass: codexDriverClass,
  // Permission hooks: `exec` never asks; the two-way mode `codex app-server` does (test/e2e/permissions-live.test.ts).
  // McpClient: test/e2e/loopback-live.test.ts proves the real binary finds (tool_search) and calls the loopback's tools.
  capabilities: cliCapabilities({ sessionFork: true, mcpClient: true }),
  vendor: { api: 'openai-responses', baseUrl: { config: 'config.toml:model_providers.durable.base_url' }, apiKey: { env: 'OPENAI_API_KEY' } },
  mcp: { config: 'config.toml:mcp_servers' },
  permissions,
  // Its first run migrates six SQLite databases before the first model call: the template is those (its skills,
  // 75 files, it unpacks faster than they are copied through the sandbox's files; `npm run bench -- homes`).
  homeTemplate: {
    dir: 'codex',
    prime: ({ home, baseUrl }) => ({
      args: ['exec', '--json', '--skip-git-repo-check', '-c', 'sandbox_mode="read-only"', '-c', 'approval_policy="never"', '--', 'Reply with one word.'],
      env: { CODEX_HOME: home, DH_TEMPLATE_KEY: 'none' },
      files: { 'config.toml': codexConfigToml({ baseUrl, envKey: 'DH_TEMPLATE_KEY' }) },
    }),
    leave: ['config.toml', 'sessions', 'thread-writer-locks', 'installation_id', 'skills'],
    empty: ['tmp', 'shell_snapshots'],
    keepTables: ['_sqlx_migrations'],
  },
  prepare: async (home, turn) => {
    const envKey = stringSetting(turn, 'apiKeyEnv') ?? 'OPENAI_API_KEY';
    const baseUrl = turn.baseUrl ?? 'https://api.openai.com/v1';
    await home.writeFile(below(driverHome(turn, 'codex'), 'config.toml').rel, codexConfigToml({ baseUrl, envKey, model: turn.model, ...(turn.mcp ? { mcp: turn.mcp } : {}) }), { createParents: true, mode: 0o600 });
  },
  command,
  session: (turn) => (turn.twoWay ? appServer : { kind: 'one-way', start: (t) => execMapper(t) }),
};

/** Where the run's state keeps codex's last running usage total per thread. */
export const usageTotalsKey = 'codex-usage-totals';

/** The stored totals, keeping only well-formed entries (non-negative counts). */
function usageTotals(value: unknown): Record<string, Usage> {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return {};
  return Object.fromEntries(Object.entries(value).flatMap(([thread, u]) => {
    const usage = usageFromJson(u);
    return usage ? [[thread, usage]] : [];
  }));
}

/** `sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl` below `dir`, newest first; walked without following links. */
function findRollout(dir: HarnessHome, threadId: string): HarnessHome | undefined {
  let entries: { name: string; type: string }[];
  try {
    entries = listHomeDir(dir) ?? [];
  } catch {
    return undefined;
  }
  for (const entry of entries.sort((a, b) => b.name.localeCompare(a.name))) {
    if (entry.type === 'directory') {
      const found = findRollout(homePath(dir, entry.name), threadId);
      if (found) return found;
    } else if (entry.type === 'file' && entry.name.startsWith('rollout-') && entry.name.endsWith(`${threadId}.jsonl`)) {
      return homePath(dir, entry.name);
    }
  }
  return undefined;
}

