/**
 * Gemini CLI adapter (driver class `GeminiCli`), measured against `@google/gemini-cli` 0.61.0.
 *
 * One process per turn: `gemini -p "" --output-format stream-json --skip-trust --approval-mode M [-m MODEL]
 * [--resume ID]`, the prompt on stdin (`-p` appends its value to stdin, so the prompt never enters argv).
 * Output lines: `init` (session_id, model), `message` (assistant deltas), `tool_use` / `tool_result`, optional
 * `error` warnings, and one `result` (`status` success|error, `stats`) that ends the turn.
 *
 * Usage: `result.stats.input_tokens` INCLUDES cached tokens (`stats.cached`), so input = input_tokens - cached;
 * Gemini has no cache-write count. Thinking tokens are billed as output but missing from `output_tokens`; they
 * are in `total_tokens` (measured: 200 in, 9 out, 100 thoughts → total 309), so reasoning = total − input_tokens −
 * output_tokens. Stats cover every model call of the turn and arrive only with `result` (no per-call usage: a
 * mid-turn budget stop can overshoot by one turn). No cost is reported.
 * Loop detection stops a turn in the middle of a model call whose usage Gemini never records (measured: 5 calls
 * served, 4 in the stats): the adapter adds one call of unknown usage, so the turn's cost is blind rather than
 * silently short. Stats that are all zero although the model answered say nothing at all: unknown, never zero.
 * Retries: Gemini has no session fork, so a retried attempt resumes the session as the failed one left it. A
 * vendor error before any answer leaves no trace in it (measured: one copy of the prompt after a retry); a failure
 * after a tool call or a killed process can leave the prompt twice (see docs/accounting.md).
 * System prompt: Gemini has no flag; `GEMINI_SYSTEM_MD=<file>` REPLACES its built-in prompt, so the file holds
 * a minimal base plus the runtime's prompt.
 *
 * Two-way mode (when the turn's permission gate can deny or ask): `gemini --acp --approval-mode default`, the
 * Agent Client Protocol (two-way/acp.ts). Gemini asks before shell commands and edits (not reads). The prompt's
 * `_meta.quota.token_count` leaves out thinking tokens and has no cache split, so the turn's usage is read from
 * gemini's own chat file (one `gemini` message per model call with `tokens` {input, output, cached, thoughts,
 * tool} and `model`), the quota only as a fallback. `session/load` works, except that 0.61.0 overwrites the session's
 * chat file when it is loaded in the same minute it was written (see `keepChatFiles`).
 */
import { z } from 'zod';
import type { DriverCommand, DriverTurn, HarnessDriver, LineMapper } from './driver.js';
import { harnessHome, homeFileSize, homePath, listHomeDir, readHomePrefix, readHomeRange, renameHomeEntry, type HarnessHome } from './harness-home.js';
import { below, cliCapabilities, driverHome, jsonLines, parseJsonLine, resumeFailed, resumeFailedOnExit, stringSetting } from './kit.js';
import { maxReadBytes } from '../sandbox/workspace-fs.js';
import { noUsage, usageOf } from '../contracts/usage.js';
import { acpSession, type AcpAgent, type PromptResult, type StoredCall } from './two-way/acp.js';
import type { HarnessEvent, PermissionPosture, PermissionReport, TerminalEvent, Usage } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const geminiCliDriverClass = 'GeminiCli';

/** The base that replaces Gemini's own system prompt; the runtime's prompt follows it. */
export const geminiBaseSystemPrompt = [
  'You are a coding agent running non-interactively in a sandboxed workspace (the current directory).',
  'Use your tools to inspect and change files in the workspace. Nobody can answer questions during a turn.',
  'Keep answers short and follow the instructions below exactly.',
].join('\n');

const approvalModes = { strict: 'default', auto: 'auto_edit', dangerous: 'yolo' } as const satisfies Record<PermissionPosture, string>;

const initLine = z.object({ type: z.literal('init'), session_id: z.string(), model: z.string().nullish() });
const messageLine = z.object({ type: z.literal('message'), role: z.string(), content: z.string().nullish(), delta: z.boolean().nullish() });
const toolUseLine = z.object({ type: z.literal('tool_use'), tool_name: z.string(), tool_id: z.string().nullish(), parameters: z.unknown().nullish() });
const toolResultLine = z.object({ type: z.literal('tool_result'), tool_id: z.string().nullish(), status: z.string().nullish() });
const warningLine = z.object({ type: z.literal('error'), severity: z.string().nullish(), message: z.string().nullish() });
const stats = z.object({
  total_tokens: z.number().nullish(),
  input_tokens: z.number().nullish(),
  output_tokens: z.number().nullish(),
  cached: z.number().nullish(),
  models: z.record(z.string(), z.unknown()).nullish(),
});
const resultLine = z.object({
  type: z.literal('result'),
  status: z.string(),
  error: z.object({ type: z.string().nullish(), message: z.string().nullish() }).nullish(),
  stats: stats.nullish(),
});
const otherLine = z.object({ type: z.string() });
/** Every line Gemini CLI prints in stream-json mode; unknown types fall through to the catch-all. */
export const geminiLine = z.union([initLine, messageLine, toolUseLine, toolResultLine, warningLine, resultLine, otherLine]);
export type GeminiLine = z.infer<typeof geminiLine>;

interface Scratch {
  sessionId?: string;
  /** When the turn started (epoch ms): a stopped turn's calls are read from the chat file from then on. */
  startedAt?: number;
  /** A tool runs (between `tool_use` and its `tool_result`): gemini is not calling the model meanwhile. */
  toolRunning?: boolean;
  /** Assistant text since the last tool use: the envelope is the final message. */
  text?: string;
  /** The model answered this turn (text or a tool call): zero stats cannot be true. */
  answered?: boolean;
  /** Loop detection stopped the turn mid-call: that call's usage is missing from the stats. */
  loop?: boolean;
}

const quota = z.object({
  token_count: z.object({ input_tokens: z.number().nullish(), output_tokens: z.number().nullish() }).nullish(),
  model_usage: z.array(z.object({ model: z.string() }).loose()).nullish(),
});

/**
 * Usage of one ACP prompt from `_meta.quota`, the only usage gemini's ACP mode reports itself. Its output count
 * leaves out thinking tokens (measured: 200 in, 9 out, 100 thoughts served → quota 200 / 9) and its input count
 * includes cached tokens with no split, so this is only the fallback when the session's chat file cannot be read:
 * reasoning and the cache fields are unknown there, not zero.
 */
export function geminiPromptUsage(result: PromptResult, sessionId: string): HarnessEvent[] {
  const parsed = quota.safeParse(result._meta?.quota);
  if (!parsed.success || !parsed.data.token_count) return [];
  const { input_tokens, output_tokens } = parsed.data.token_count;
  const events: HarnessEvent[] = [{ type: 'usage', usage: usageOf({ input: input_tokens, output: output_tokens }) }];
  const models = parsed.data.model_usage ?? [];
  if (models.length === 1) events.push({ type: 'session', sessionId, model: models[0]!.model });
  return events;
}

const chatMessage = z.object({
  id: z.string(),
  timestamp: z.string(),
  type: z.string(),
  model: z.string().nullish(),
  tokens: z
    .object({ input: z.number().nullish(), output: z.number().nullish(), cached: z.number().nullish(), thoughts: z.number().nullish(), tool: z.number().nullish() })
    .nullish(),
});

/**
 * The model calls gemini recorded for `sessionId` since `since` (epoch ms), from its chat files
 * (`<home>/.gemini/tmp/<project>/chats/*.jsonl`): one `gemini` message per call with `tokens` {input (cached
 * included), output, cached, thoughts, tool}, and the model. Every file of the session counts (a kept one and the
 * one gemini records into); a message is taken once by its id. A file is read from its end back to the first message
 * older than `since` (in `chunkBytes` pieces, `capBytes` at most), so a chat file of any size yields the whole turn.
 */
export function readGeminiChatCalls(geminiHome: HarnessHome, sessionId: string, since: number, chunkBytes = maxReadBytes, capBytes = chatReadCapBytes): z.infer<typeof chatMessage>[] {
  const calls = new Map<string, z.infer<typeof chatMessage>>();
  const tmp = homePath(geminiHome, '.gemini', 'tmp');
  for (const project of safeList(tmp)) {
    if (project.type !== 'directory') continue;
    const chats = homePath(tmp, project.name, 'chats');
    for (const file of safeList(chats)) {
      if (file.type !== 'file' || !file.name.endsWith('.jsonl')) continue;
      let lines: string[];
      try {
        const head = parseJsonLine(readHomePrefix(homePath(chats, file.name), chatHeadBytes)?.toString('utf8').split('\n')[0] ?? '') as { sessionId?: unknown } | undefined;
        if (head?.sessionId !== sessionId) continue;
        lines = chatLinesSince(homePath(chats, file.name), since, chunkBytes, capBytes);
      } catch {
        continue;
      }
      for (const line of lines) {
        const m = chatMessage.safeParse(parseJsonLine(line));
        if (m.success && m.data.type === 'gemini' && m.data.tokens && Date.parse(m.data.timestamp) >= since) calls.set(m.data.id, m.data);
      }
    }
  }
  return [...calls.values()].sort((a, b) => Date.parse(a.timestamp) - Date.parse(b.timestamp));
}

/** How much of a chat file's start holds its first line (the session's metadata: id, project, times). */
const chatHeadBytes = 64 * 1024;

/** How much of a chat file a turn's usage may read: the harness writes the file, so the read is bounded. */
const chatReadCapBytes = 4 * maxReadBytes;

/**
 * The whole lines at the end of a chat file, reaching back to a message older than `since` or to the file's start:
 * read backwards in `chunkBytes` pieces, never more of the file than that takes. A file that would need more than
 * `capBytes` (a harness can write any size) is refused with an error: the turn's usage then comes from the ACP
 * quota, marked as such, rather than from part of the turn.
 */
function chatLinesSince(file: HarnessHome, since: number, chunkBytes: number, capBytes: number): string[] {
  let end = homeFileSize(file) ?? 0;
  let tail = Buffer.alloc(0);
  while (end > 0) {
    if (tail.length >= capBytes) throw new Error(`gemini chat file: the turn's calls reach back more than ${capBytes} bytes`);
    const start = Math.max(0, end - chunkBytes);
    tail = Buffer.concat([readHomeRange(file, start, end - start)?.data ?? Buffer.alloc(0), tail]);
    end = start;
    if (end === 0) break;
    // The first line may be cut: only the lines after it are whole. Messages are in time order, so the oldest
    // whole message says whether the turn's start has been reached.
    const whole = tail.subarray(tail.indexOf(0x0a) + 1).toString('utf8').split('\n');
    let oldest: number | undefined;
    for (const line of whole) if ((oldest = timestampOf(line)) !== undefined) break;
    if (oldest !== undefined && oldest < since) return whole;
  }
  return tail.toString('utf8').split('\n');
}

/** When a chat line's message was recorded (epoch ms); `undefined` for a line that is not a message. */
function timestampOf(line: string): number | undefined {
  const timestamp = (parseJsonLine(line) as { timestamp?: unknown } | undefined)?.timestamp;
  return typeof timestamp === 'string' ? Date.parse(timestamp) : undefined;
}

/** A file's size below a home (found without following links or reading it); `undefined` when absent or unreadable. */
function sizeOf(file: HarnessHome): number | undefined {
  try {
    return homeFileSize(file);
  } catch {
    return undefined;
  }
}

/** One recorded call's tokens, normalised: input without cached tokens (tool-use prompt tokens are input), thoughts as reasoning. */
export function geminiChatUsage(t: NonNullable<z.infer<typeof chatMessage>['tokens']>): Usage {
  return usageOf({
    input: t.input == null ? undefined : Math.max(0, t.input - (t.cached ?? 0)) + (t.tool ?? 0),
    output: t.output,
    cacheRead: t.cached,
    reasoning: t.thoughts,
  });
}

/**
 * Usage from `result.stats`, normalised: input without cached tokens, reasoning = total − input − output (the
 * thinking tokens Gemini leaves out of `output_tokens`). Gemini has no cache-write count: unknown, not zero.
 */
export function geminiUsage(s: z.infer<typeof stats>): Usage {
  const cached = s.cached ?? 0;
  const reasoning =
    s.total_tokens != null && s.input_tokens != null && s.output_tokens != null ? Math.max(0, s.total_tokens - s.input_tokens - s.output_tokens) : undefined;
  return usageOf({
    input: s.input_tokens == null ? undefined : Math.max(0, s.input_tokens - cached),
    output: s.output_tokens,
    cacheRead: s.cached,
    reasoning,
  });
}

/** Stats that count nothing at all. */
function allZero(s: z.infer<typeof stats>): boolean {
  return !s.total_tokens && !s.input_tokens && !s.output_tokens && !s.cached;
}

/**
 * Gemini 0.61.0 names a session's chat file after the minute it starts (`session-YYYY-MM-DDTHH-MM-<id8>.jsonl`)
 * and, when `session/load` runs in that same minute, starts a fresh recording in the very same file before
 * reading it, which wipes the conversation ("No previous sessions found"). Every load also leaves a fresh
 * recording of the session under the current minute's name, and when several files hold the session gemini picks
 * one by its last-update time — which can be such a fresh recording (measured: turn 1 in one minute, a failed
 * attempt in the next, its retry loaded the context-only file, failed to resume and started over).
 * So before each load exactly one file of the session stays visible: the longest (the conversation only grows; a
 * fresh recording holds the context preamble alone), under a name gemini never generates (`…-kept-<id8>.jsonl`;
 * gemini finds it by content, not by name). Every other file of the session is renamed out of gemini's reach
 * (`superseded-…`, not a session file name).
 * The home is in the workspace, which the harness writes: directories are walked and entries renamed without
 * following a link (a planted link is skipped, never renamed through).
 */
export function keepChatFiles(geminiHome: HarnessHome, sessionId: string): void {
  const short = sessionId.slice(0, 8).replace(/[^\w-]/g, '');
  const ofSession = new RegExp(`^session-\\d{4}-\\d{2}-\\d{2}T\\d{2}-\\d{2}-(?:kept-)?${short}\\.jsonl$`);
  const tmp = homePath(geminiHome, '.gemini', 'tmp');
  for (const project of safeList(tmp)) {
    if (project.type !== 'directory') continue;
    const chats = homePath(tmp, project.name, 'chats');
    const files = safeList(chats)
      .filter((file) => file.type === 'file' && ofSession.test(file.name))
      .map((file) => ({ name: file.name, size: sizeOf(homePath(chats, file.name)) ?? 0 }))
      .sort((a, b) => b.size - a.size);
    const [conversation, ...others] = files;
    if (!conversation) continue;
    others.forEach((file, i) => renameHomeEntry(homePath(chats, file.name), `superseded-${Date.now()}-${i}-${file.name}.aside`));
    if (!conversation.name.includes('-kept-')) renameHomeEntry(homePath(chats, conversation.name), conversation.name.replace(/-([^-]+)\.jsonl$/, '-kept-$1.jsonl'));
  }
}

/** A directory's entries; none when it is absent or not a directory we may walk (a link, for instance). */
function safeList(dir: HarnessHome): { name: string; type: string }[] {
  try {
    return listHomeDir(dir) ?? [];
  } catch {
    return [];
  }
}

const names = { label: 'Gemini CLI' };
const unknownSession = /Error resuming session|Invalid session identifier/;

/**
 * The model calls gemini recorded in the session's chat file since `since` (per call, thinking tokens included; the
 * ACP quota misses them): it records each call as soon as the call ends, before its tools run or ask (measured).
 */
function chatCalls(turn: DriverTurn, sessionId: string, since: number): StoredCall[] {
  let calls: ReturnType<typeof readGeminiChatCalls> = [];
  try {
    const home = harnessHome(turn, 'gemini');
    calls = home ? readGeminiChatCalls(home, sessionId, since) : [];
  } catch {
    calls = [];
  }
  return calls.map((c) => ({ id: c.id, usage: geminiChatUsage(c.tokens!), ...(c.model ? { model: c.model } : {}) }));
}

function permissions(posture: PermissionPosture): PermissionReport {
  const mode = approvalModes[posture];
  if (posture === 'strict') {
    return {
      posture,
      enforced: true,
      note:
        'Two-way mode (gemini --acp, --approval-mode default): every shell command and edit is decided by the permission ' +
        'gate (the policy, then an operator) before it runs; reads run unasked; an edit or a denial reason reaches the ' +
        `model as a follow-up prompt. Without a gate: --approval-mode ${mode}, tools that need approval are not offered.`,
    };
  }
  return { posture, enforced: true, note: `--approval-mode ${mode}${posture === 'auto' ? '; with permission rules: the two-way mode, as for strict' : ''}` };
}

function command(turn: DriverTurn): DriverCommand {
  const home = driverHome(turn, 'gemini');
  const argv = turn.twoWay
    ? [turn.executable, ...turn.baseArgs, '--acp', '--skip-trust']
    : [turn.executable, ...turn.baseArgs, '-p', '', '--output-format', 'stream-json', '--skip-trust'];
  // Two-way: "default" is the mode that asks before shell commands and edits.
  argv.push('--approval-mode', turn.twoWay ? 'default' : approvalModes[turn.posture]);
  if (turn.model) argv.push('-m', turn.model);
  // Two-way: the session is loaded over ACP (session/load), not by flag.
  if (turn.resumeSessionId && !turn.twoWay) argv.push('--resume', turn.resumeSessionId);
  // TMPDIR: Gemini writes its error reports to the temp directory; keep them in the run's home.
  const env: Record<string, string> = { HOME: home.path, TMPDIR: below(home, 'tmp').path };
  if (turn.baseUrl) env.GOOGLE_GEMINI_BASE_URL = turn.baseUrl;
  // Gemini reads the file (written by `prepare`) on every start, and resumed turns need it too.
  if (turn.systemPrompt !== undefined) env.GEMINI_SYSTEM_MD = below(home, 'system.md').path;
  const apiKeyEnv = stringSetting(turn, 'apiKeyEnv');
  if (apiKeyEnv && turn.env[apiKeyEnv] !== undefined) env.GEMINI_API_KEY = turn.env[apiKeyEnv];
  if (!turn.twoWay) return { argv, stdin: turn.prompt, env };
  // The first ACP line does not depend on the turn: the conversation itself starts in the session's mapper.
  return { argv, env, keepStdinOpen: true };
}

/** One headless stream-json turn. */
function streamMapper(turn: DriverTurn): LineMapper {
  const scratch: Scratch = {};
  const result = (value: z.infer<typeof resultLine>): HarnessEvent[] => {
    const events: HarnessEvent[] = [];
    if (value.stats) {
      // All-zero stats after the model answered are not a count: the usage is unknown.
      const usage = allZero(value.stats) && scratch.answered ? noUsage : geminiUsage(value.stats);
      events.push({ type: 'usage', usage });
      // The call loop detection cut off: spent, and not in the stats.
      if (scratch.loop && usage !== noUsage) events.push({ type: 'usage', usage: noUsage });
      // The models that actually answered (routing may differ from the requested one).
      const used = Object.keys(value.stats.models ?? {});
      if (used.length === 1 && scratch.sessionId) events.push({ type: 'session', sessionId: scratch.sessionId, model: used[0] });
    }
    if (value.status === 'success') {
      events.push({ type: 'turn-complete', text: scratch.text ?? '' });
    } else {
      const message = value.error?.message ?? `Gemini ended the turn with status "${value.status}"`;
      events.push({ type: 'session-error', code: 'vendor-error', message });
    }
    return events;
  };
  return {
    line: jsonLines(geminiLine, {
      init: (value) => {
        const v = value as z.infer<typeof initLine>;
        scratch.sessionId = v.session_id;
        scratch.startedAt ??= Date.now();
        return { type: 'session', sessionId: v.session_id, model: v.model ?? undefined };
      },
      message: (value) => {
        const v = value as z.infer<typeof messageLine>;
        if (v.role !== 'assistant' || !v.content) return undefined;
        scratch.answered = true;
        scratch.text = (scratch.text ?? '') + v.content;
        return { type: 'text', text: v.content };
      },
      tool_use: (value) => {
        const v = value as z.infer<typeof toolUseLine>;
        scratch.text = undefined;
        scratch.answered = true;
        scratch.toolRunning = true;
        return { type: 'activity', description: `${v.tool_name} ${JSON.stringify(v.parameters ?? {})}` };
      },
      tool_result: (value) => {
        scratch.toolRunning = false;
        return { type: 'activity', description: `tool result: ${(value as z.infer<typeof toolResultLine>).status ?? 'unknown'}` };
      },
      error: (value) => {
        const v = value as z.infer<typeof warningLine>;
        // Loop detection stops the turn mid-call: that call never reaches the stats.
        if (/loop detected/i.test(v.message ?? '')) {
          scratch.answered = true;
          scratch.loop = true;
        }
        return { type: 'activity', description: `gemini ${v.severity ?? 'error'}: ${v.message ?? ''}` };
      },
      result: (value) => result(value as z.infer<typeof resultLine>),
    }),
    exit: (code, stderrTail) => geminiExit(turn, code, stderrTail),
    /**
     * A turn cut off before its `result` (killed, cancelled, timed out, crashed) has no stats: its finished calls are in
     * the chat file (gemini records each as it ends), and a call it was making when it was stopped is of unknown usage.
     */
    unreported: () => {
      if (scratch.startedAt === undefined || !scratch.sessionId) return [];
      const calls = chatCalls(turn, scratch.sessionId, scratch.startedAt);
      scratch.startedAt = undefined;
      const events: HarnessEvent[] = calls.map((c) => ({ type: 'usage', usage: c.usage ?? noUsage }));
      if (!scratch.toolRunning) events.push({ type: 'usage', usage: noUsage });
      return events;
    },
  };
}

function geminiExit(turn: DriverTurn, code: number | null, stderrTail: string): TerminalEvent | undefined {
  const resume = resumeFailedOnExit(names, unknownSession, turn, code, stderrTail);
  if (resume) return resume;
  if (code === 41) {
    return { type: 'session-error', code: 'vendor-error', message: 'Gemini CLI rejected its authentication settings (exit 41).', exitCode: code, stderrTail };
  }
  return undefined;
}

/** The two-way mode: gemini `--acp`, its usage per call from its chat file. */
const geminiAcp: AcpAgent = {
  label: names.label,
  forks: false,
  resumeFailed: (turn, reason) => resumeFailed(names, turn, { reason }),
  storedCalls: chatCalls,
  resultUsage: (result, sessionId) => {
    const fallback = geminiPromptUsage(result, sessionId);
    if (fallback.length === 0) return fallback;
    return [{ type: 'activity', description: "Gemini CLI usage from its ACP quota (thinking tokens unknown): its session's chat file was not readable" }, ...fallback];
  },
  exit: geminiExit,
};

/** The Gemini CLI driver (`gemini -p`; two-way: `gemini --acp`). */
export const geminiCli: HarnessDriver = {
  specificationVersion: 'v2',
  driverClass: geminiCliDriverClass,
  // Permission hooks: headless mode cannot ask; the two-way ACP mode does (test/e2e/permissions-live.test.ts). No fork.
  // McpClient: test/e2e/loopback-live.test.ts proves the real binary lists and calls the loopback's tools.
  capabilities: cliCapabilities({ mcpClient: true }),
  vendor: { api: 'gemini', baseUrl: { env: 'GOOGLE_GEMINI_BASE_URL' }, apiKey: { env: 'GEMINI_API_KEY' } },
  mcp: { config: '.gemini/settings.json:mcpServers' },
  permissions,
  prepare: async (fs, turn) => {
    const home = driverHome(turn, 'gemini');
    const settings = {
      // Without it Gemini picks "gateway" auth and exits 41.
      security: { auth: { selectedType: 'gemini-api-key' } },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
      general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
      // The run's MCP loopback: gemini expands $VAR in settings, so the token stays in the environment. `trust`: its
      // tools only read, so they run unasked (the permission gate is for tools that act).
      ...(turn.mcp ? { mcpServers: { [turn.mcp.name]: { httpUrl: turn.mcp.url, headers: { Authorization: `Bearer $${turn.mcp.tokenEnv}` }, trust: true, timeout: 30_000 } } } : {}),
    };
    await fs.writeFile(below(home, '.gemini', 'settings.json').rel, `${JSON.stringify(settings, null, 2)}\n`, { createParents: true, mode: 0o600 });
    await fs.mkdir(below(home, 'tmp').rel, { recursive: true });
    if (turn.systemPrompt !== undefined) {
      await fs.writeFile(below(home, 'system.md').rel, `${geminiBaseSystemPrompt}\n\n${turn.systemPrompt}\n`, { createParents: true, mode: 0o600 });
    }
    // Transition: renames go through the host's view of the home until `SandboxFs` has them.
    const hostHome = harnessHome(turn, 'gemini');
    if (turn.twoWay && turn.resumeSessionId && hostHome) keepChatFiles(hostHome, turn.resumeSessionId);
  },
  command,
  session: (turn) => (turn.twoWay ? acpSession(geminiAcp) : { kind: 'one-way', start: (t) => streamMapper(t) }),
};
