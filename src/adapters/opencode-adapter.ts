/**
 * OpenCode adapter (driver class `OpenCode`), measured against `opencode-ai` 1.18.33.
 *
 * One process per turn: `opencode run --format json -m PROVIDER/MODEL [--title T | --session ID]`, the prompt
 * on stdin (`run` reads stdin when it is not a TTY; positional words would be re-quoted and joined).
 * Output lines all carry `sessionID`: `step_start`, `text` (whole text parts), `reasoning`, `tool_use`,
 * `step_finish` (`part.reason`, `part.tokens`, `part.cost`) and `error`. There is no end-of-turn line: the last
 * `step_finish` with reason `stop` ends the turn and the process exits.
 *
 * Usage: each `step_finish.part.tokens` is one model call; `tokens.input` already EXCLUDES cached tokens
 * (measured: prompt_tokens 120 with 20 cached → input 100, cache.read 20), `cache.write` is reported, and
 * reasoning tokens are reported apart from `output` (measured: completion 109 with 100 reasoning → output 9,
 * reasoning 100), which is exactly the normalised shape. One usage event per step, as it finishes. OpenCode's per-session title call (a second model call on a new session) never
 * appears in the JSON output, so its tokens cannot be counted: the adapter passes `--title` on a new session,
 * which skips that call altogether. Cost: `part.cost` per step, from OpenCode's own price table; for the custom
 * provider it defines, the adapter reports it only when `settings.cost` gave prices (else OpenCode says 0).
 * Model: the JSON output never names the model, so none is reported.
 * Resume: `--session ID --fork` continues the session in a NEW one branched from it, leaving ID as it was, so a
 * retried attempt never feeds its prompt twice (`settings.forkSessions: false` resumes in place).
 *
 * Two-way mode (when the turn's permission gate can deny or ask): `opencode acp`, the Agent Client Protocol
 * (two-way/acp.ts), with `permission` set to "ask" for edit, bash, webfetch and external directories. A denial
 * ends OpenCode's prompt, so the model hears about it in a follow-up prompt. The prompt's ACP `usage` covers
 * only its LAST model call (measured: three calls of 100/200/300 input reported 300), so the turn's usage is
 * read from OpenCode's own session store (`<home>/data/opencode/opencode.db`, table `message`: one row per
 * model call with `tokens`, `cost`, `modelID`), which also gives the model.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { z } from 'zod';
import type { DriverCommand, DriverTurn, HarnessDriver, LineMapper } from './driver.js';
import { harnessHome, homePath, readHomeBytes, readHomePrefix, type HarnessHome } from './harness-home.js';
import { below, cliCapabilities, driverHome, numberSetting, parseJsonLine, resumeFailed, resumeFailedOnExit, stringSetting, type DriverHome } from './kit.js';
import { noUsage, usageOf } from '../contracts/usage.js';
import { acpSession, type AcpAgent, type StoredCall } from './two-way/acp.js';
import type { HarnessEvent, PermissionPosture, PermissionReport, Usage } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const openCodeDriverClass = 'OpenCode';

/** Provider id the adapter defines in `opencode.json` when a base URL is configured. */
export const openCodeProviderId = 'durable';

/**
 * OpenCode retries an unreachable or failing API for ever; a turn never needs this long against a healthy
 * vendor, so the turn timeout is capped here unless `settings.maxTurnMs` says otherwise.
 */
export const openCodeDefaultMaxTurnMs = 10 * 60_000;

const permissions = {
  strict: { edit: 'deny', bash: 'deny', webfetch: 'deny', external_directory: 'deny' },
  auto: { edit: 'allow', bash: 'allow', webfetch: 'deny', external_directory: 'deny' },
  dangerous: { edit: 'allow', bash: 'allow', webfetch: 'allow', external_directory: 'allow' },
} as const satisfies Record<PermissionPosture, Record<string, string>>;

/** Two-way mode: every tool OpenCode gates asks (and the runtime's gate answers). */
const askEverything = { edit: 'ask', bash: 'ask', webfetch: 'ask', external_directory: 'ask' } as const;

const storedMessage = z.object({
  role: z.string(),
  /** `completed` once the call is over: its tokens are final only then. */
  time: z.object({ completed: z.number().nullish() }).loose().nullish(),
  modelID: z.string().nullish(),
  cost: z.number().nullish(),
  tokens: z.object({ input: z.number().nullish(), output: z.number().nullish(), reasoning: z.number().nullish(), cache: z.object({ read: z.number().nullish(), write: z.number().nullish() }).nullish() }).nullish(),
});

/** The assistant messages (one per model call) OpenCode stored for a session since `since` (epoch ms). */
export function readOpenCodeMessages(dbFile: string, sessionId: string, since: number, options: { readonly?: boolean } = {}): (z.infer<typeof storedMessage> & { id: string })[] {
  // A private copy is opened writable so SQLite can rebuild the log's index (`-shm`) and recover the log.
  const db = new Database(dbFile, { readonly: options.readonly ?? true, fileMustExist: true });
  try {
    // The row id names a call across reads (a copy of the file keeps it).
    const rows = db.prepare('SELECT rowid AS n, data FROM message WHERE session_id = ? AND time_created >= ? ORDER BY time_created').all(sessionId, since) as { n: number; data: string }[];
    return rows.flatMap((row) => {
      const parsed = storedMessage.safeParse(JSON.parse(row.data));
      return parsed.success && parsed.data.role === 'assistant' ? [{ ...parsed.data, id: String(row.n) }] : [];
    });
  } finally {
    db.close();
  }
}

/** Size of a SQLite write-ahead log's header (checkpoint sequence and salts change when the log restarts). */
const walHeaderBytes = 32;

/**
 * `readOpenCodeMessages` on the store in an OpenCode home. The home is in the workspace, which the harness
 * writes, so the store is never opened where it is: a planted link would have the worker open a file of the
 * harness's choosing (and SQLite create a `-shm` beside it). The database and its write-ahead log are copied
 * out without following links into a private directory and read there; SQLite recovers the log's committed
 * frames (a torn last frame fails its checksum and is left out). A log that restarted during the copy (a
 * checkpoint finished and a new write began) makes the pair inconsistent, so it is copied again.
 */
export function readOpenCodeStore(home: HarnessHome, sessionId: string, since: number): ReturnType<typeof readOpenCodeMessages> {
  const store = homePath(home, 'data', 'opencode');
  const dbFile = homePath(store, 'opencode.db');
  const walFile = homePath(store, 'opencode.db-wal');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-opencode-store-'));
  try {
    for (let attempt = 1; ; attempt += 1) {
      const headerBefore = readHomePrefix(walFile, walHeaderBytes);
      const db = readHomeBytes(dbFile);
      if (db === undefined) throw new Error('OpenCode has no session store yet');
      const wal = readHomeBytes(walFile);
      const sameLog = (headerBefore === undefined && wal === undefined) || (headerBefore !== undefined && wal !== undefined && headerBefore.equals(wal.subarray(0, walHeaderBytes)));
      if (!sameLog && attempt < 3) continue;
      if (!sameLog) throw new Error("OpenCode's session store kept changing while it was copied");
      const copy = path.join(dir, 'opencode.db');
      writeFileSync(copy, db, { flag: 'wx', mode: 0o600 });
      if (wal !== undefined) writeFileSync(`${copy}-wal`, wal, { flag: 'wx', mode: 0o600 });
      return readOpenCodeMessages(copy, sessionId, since, { readonly: false });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const base = { sessionID: z.string().nullish() };
const stepStartLine = z.object({ type: z.literal('step_start'), ...base });
const textLine = z.object({ type: z.literal('text'), ...base, part: z.object({ text: z.string().nullish() }) });
const toolUseLine = z.object({
  type: z.literal('tool_use'),
  ...base,
  part: z.object({ tool: z.string().nullish(), state: z.object({ status: z.string().nullish(), title: z.string().nullish() }).nullish() }),
});
const tokens = z.object({
  input: z.number().nullish(),
  output: z.number().nullish(),
  reasoning: z.number().nullish(),
  cache: z.object({ read: z.number().nullish(), write: z.number().nullish() }).nullish(),
});
const stepFinishLine = z.object({
  type: z.literal('step_finish'),
  ...base,
  part: z.object({ reason: z.string().nullish(), tokens: tokens.nullish(), cost: z.number().nullish() }),
});
const errorLine = z.object({
  type: z.literal('error'),
  ...base,
  error: z.object({ name: z.string().nullish(), data: z.object({ message: z.string().nullish() }).loose().nullish() }).nullish(),
});
const otherLine = z.object({ type: z.string(), ...base });
/** Every line `opencode run --format json` prints; unknown types fall through to the catch-all. */
export const openCodeLine = z.union([stepStartLine, textLine, toolUseLine, stepFinishLine, errorLine, otherLine]);
export type OpenCodeLine = z.infer<typeof openCodeLine>;

interface Scratch {
  sessionId?: string;
  /** Text of the current step: the final step's text is the envelope. */
  text?: string;
  /** A step started and has not finished. */
  open?: boolean;
  lastReason?: string;
}

/** Usage of one `step_finish` (one model call), normalised; a count OpenCode leaves out stays unknown. */
export function openCodeUsage(t: z.infer<typeof tokens>): Usage {
  return usageOf({ input: t.input, output: t.output, reasoning: t.reasoning, cacheRead: t.cache?.read, cacheWrite: t.cache?.write });
}

/**
 * `settings.cost` (USD per million tokens: input, output, cacheRead, cacheWrite) in OpenCode's model `cost` shape.
 */
function priceOf(turn: Pick<DriverTurn, 'settings'>): Record<string, number> | undefined {
  const cost = turn.settings.cost as Record<string, unknown> | undefined;
  if (typeof cost !== 'object' || cost === null) return undefined;
  const num = (v: unknown): number => (typeof v === 'number' ? v : 0);
  return { input: num(cost.input), output: num(cost.output), cache_read: num(cost.cacheRead), cache_write: num(cost.cacheWrite) };
}

const names = { label: 'OpenCode' };
const unknownSession = /Session not found/i;

/** OpenCode prices a custom model at 0 unless the catalog gave prices: only then is its cost meaningful. */
function reportsCost(turn: DriverTurn): boolean {
  return priceOf(turn) !== undefined || !turn.baseUrl;
}

function permissionReport(posture: PermissionPosture): PermissionReport {
  const rules = Object.entries(permissions[posture]).map(([k, v]) => `${k}:${v}`).join(', ');
  if (posture === 'strict') {
    return {
      posture,
      enforced: true,
      note:
        'Two-way mode (opencode acp, permission "ask" for edit, bash, webfetch, external_directory): each is decided by the ' +
        "permission gate (the policy, then an operator) before it runs; a denial ends OpenCode's prompt and the model " +
        `hears why in a follow-up prompt; edits are emulated. Without a gate: permission {${rules}}, denied tools never run.`,
    };
  }
  const rulesNote = posture === 'auto' ? '; with permission rules: the two-way mode, as for strict' : '';
  return { posture, enforced: true, note: `opencode.json permission {${rules}}; denied tools are never run (run mode cannot ask)${rulesNote}.` };
}

/** The model argument: our provider's model when a base URL is set, else the catalog's `provider/model`. */
function modelArg(turn: DriverTurn): string | undefined {
  if (!turn.model) return undefined;
  return turn.baseUrl ? `${stringSetting(turn, 'providerId') ?? openCodeProviderId}/${turn.model}` : turn.model;
}

/** `opencode.json` for the turn (and the instructions file it names). */
function configOf(turn: DriverTurn, home: DriverHome): Record<string, unknown> {
  const doc: Record<string, unknown> = {
    $schema: 'https://opencode.ai/config.json',
    autoupdate: false,
    share: 'disabled',
    permission: turn.twoWay ? askEverything : permissions[turn.posture],
    // `acp` has no --title: without this a new session makes a title model call whose tokens OpenCode never reports.
    ...(turn.twoWay ? { agent: { title: { disable: true } } } : {}),
  };
  const price = priceOf(turn);
  if (turn.baseUrl && turn.model) {
    const providerId = stringSetting(turn, 'providerId') ?? openCodeProviderId;
    const apiKeyEnv = stringSetting(turn, 'apiKeyEnv') ?? 'OPENAI_API_KEY';
    doc.provider = {
      [providerId]: {
        npm: stringSetting(turn, 'npm') ?? '@ai-sdk/openai-compatible',
        name: 'durable-harness vendor',
        // The key stays in the environment: the config only names the variable.
        options: { baseURL: turn.baseUrl, apiKey: `{env:${apiKeyEnv}}` },
        models: { [turn.model]: { name: turn.model, ...(price ? { cost: price } : {}) } },
      },
    };
  }
  const model = modelArg(turn);
  if (model) {
    doc.model = model;
    doc.small_model = model;
  }
  if (turn.systemPrompt !== undefined) doc.instructions = [below(home, 'instructions.md').path];
  // The run's MCP loopback: OpenCode substitutes {env:VAR}, so the token stays in the environment.
  if (turn.mcp) doc.mcp = { [turn.mcp.name]: { type: 'remote', url: turn.mcp.url, headers: { Authorization: `Bearer {env:${turn.mcp.tokenEnv}}` }, oauth: false, enabled: true } };
  return doc;
}

function environment(home: DriverHome): Record<string, string> {
  return {
    HOME: home.path,
    XDG_CONFIG_HOME: `${home.path}/config`,
    XDG_DATA_HOME: `${home.path}/data`,
    XDG_CACHE_HOME: `${home.path}/cache`,
    XDG_STATE_HOME: `${home.path}/state`,
    OPENCODE_CONFIG: below(home, 'opencode.json').path,
    OPENCODE_DISABLE_MODELS_FETCH: '1',
    OPENCODE_DISABLE_AUTOUPDATE: '1',
    // The repository is hostile input: its own opencode.json (MCP servers that run commands, looser permissions) is
    // never read — test/e2e/mcp-planted-live.test.ts plants one.
    OPENCODE_DISABLE_PROJECT_CONFIG: '1',
    // OpenCode installs its plugin package from the npm registry on every start; offline, it uses what it has.
    npm_config_offline: 'true',
  };
}

function command(turn: DriverTurn): DriverCommand {
  const home = driverHome(turn, 'opencode');
  // OpenCode retries a failing API for ever: the turn is capped unless the catalog says otherwise.
  const timeoutMs = numberSetting(turn, 'maxTurnMs') ?? openCodeDefaultMaxTurnMs;
  if (turn.twoWay) {
    return { argv: [turn.executable, ...turn.baseArgs, 'acp'], env: environment(home), keepStdinOpen: true, timeoutMs };
  }
  const argv = [turn.executable, ...turn.baseArgs, 'run', '--format', 'json'];
  const model = modelArg(turn);
  if (model) argv.push('-m', model);
  // A given title skips OpenCode's title-generation model call, whose tokens it never reports.
  if (turn.resumeSessionId) argv.push('--session', turn.resumeSessionId, ...(turn.fork ? ['--fork'] : []));
  else argv.push('--title', `durable-harness ${turn.runId}`);
  return { argv, stdin: turn.prompt, env: environment(home), timeoutMs };
}

/**
 * The model calls OpenCode stored for the session (the ACP result's own usage is only the last): one assistant
 * message per call, its tokens final once it is completed — an unfinished one (a tool still asking, measured) has
 * zeros there, which are not a count.
 */
function storedCalls(turn: DriverTurn, sessionId: string, since: number): StoredCall[] {
  let messages: ReturnType<typeof readOpenCodeMessages>;
  try {
    const home = harnessHome(turn, 'opencode');
    messages = home ? readOpenCodeStore(home, sessionId, since) : [];
  } catch {
    messages = [];
  }
  return messages.map((m) => ({
    id: m.id,
    usage: m.time?.completed != null && m.tokens ? openCodeUsage(m.tokens) : undefined,
    ...(reportsCost(turn) && m.cost != null ? { costUsd: m.cost } : {}),
    ...(m.modelID ? { model: m.modelID } : {}),
  }));
}

/** One `opencode run --format json` turn. */
function runMapper(turn: DriverTurn): LineMapper {
  const scratch: Scratch = {};
  const withCost = reportsCost(turn);
  return {
    line: (line) => {
      const parsed = openCodeLine.safeParse(parseJsonLine(line));
      if (!parsed.success) return { type: 'unknown', raw: line };
      const value = parsed.data;
      const events: HarnessEvent[] = [];
      if (value.sessionID && scratch.sessionId === undefined) {
        scratch.sessionId = value.sessionID;
        // Model: not in the JSON output (see the file comment), so it is not reported.
        events.push({ type: 'session', sessionId: value.sessionID });
      }
      switch (value.type) {
        case 'step_start':
          scratch.text = undefined;
          scratch.open = true;
          break;
        case 'text': {
          const text = (value as z.infer<typeof textLine>).part.text ?? '';
          scratch.text = (scratch.text ?? '') + text;
          if (text) events.push({ type: 'text', text });
          break;
        }
        case 'tool_use': {
          const part = (value as z.infer<typeof toolUseLine>).part;
          events.push({ type: 'activity', description: `${part.tool ?? 'tool'} ${part.state?.title ?? ''} (${part.state?.status ?? 'unknown'})`.trim() });
          break;
        }
        case 'step_finish': {
          const part = (value as z.infer<typeof stepFinishLine>).part;
          scratch.open = false;
          scratch.lastReason = part.reason ?? 'unknown';
          const cost = withCost && part.cost != null ? { costUsd: part.cost } : {};
          if (part.tokens) events.push({ type: 'usage', usage: openCodeUsage(part.tokens), ...cost });
          if (part.reason === 'stop') events.push({ type: 'turn-complete', text: scratch.text ?? '' });
          break;
        }
        case 'error': {
          const error = (value as z.infer<typeof errorLine>).error;
          const message = error?.data?.message ?? error?.name ?? 'OpenCode reported an error';
          events.push({ type: 'session-error', code: 'vendor-error', message: `${error?.name ?? 'Error'}: ${message}` });
          break;
        }
        case 'reasoning':
          break;
        default:
          events.push({ type: 'unknown', raw: line });
      }
      return events;
    },
    exit: (code, stderrTail) => {
      const resume = resumeFailedOnExit(names, unknownSession, turn, code, stderrTail);
      if (resume) return resume;
      // A last step that ended for another reason than `stop` (e.g. `length`) still ends the turn.
      if (code === 0 && scratch.open === false && scratch.lastReason !== 'tool-calls') return { type: 'turn-complete', text: scratch.text ?? '' };
      return undefined;
    },
    // A step started and never finished: a model call whose usage OpenCode never reported.
    unreported: () => (scratch.open ? [{ type: 'usage', usage: noUsage }] : []),
  };
}

/** The two-way mode: `opencode acp`, its usage per call from its session store. */
const openCodeAcp: AcpAgent = {
  label: names.label,
  forks: true,
  resumeFailed: (turn, reason) => resumeFailed(names, turn, { reason }),
  storedCalls,
  resultUsage: (result) => {
    const u = result.usage;
    if (!u) return [];
    // The store could not be read: the ACP figure undercounts multi-call prompts, and says so.
    return [
      { type: 'activity', description: 'OpenCode usage from its ACP result (last model call only): its session store was not readable' },
      { type: 'usage', usage: usageOf({ input: u.inputTokens, output: u.outputTokens, cacheRead: u.cachedReadTokens, cacheWrite: u.cachedWriteTokens }) },
    ];
  },
  exit: (turn, code, stderrTail) => resumeFailedOnExit(names, unknownSession, turn, code, stderrTail),
};

/** The OpenCode driver (`opencode run`; two-way: `opencode acp`). */
export const openCode: HarnessDriver = {
  specificationVersion: 'v2',
  driverClass: openCodeDriverClass,
  // Permission hooks: `run` cannot ask; the two-way mode `opencode acp` does (test/e2e/permissions-live.test.ts).
  // McpClient: test/e2e/loopback-live.test.ts proves the real binary lists and calls the loopback's tools.
  capabilities: cliCapabilities({ sessionFork: true, mcpClient: true }),
  vendor: { api: 'any', baseUrl: { config: 'opencode.json:provider.durable.options.baseURL' }, apiKey: { env: 'OPENAI_API_KEY' } },
  mcp: { config: 'opencode.json:mcp' },
  permissions: permissionReport,
  prepare: async (fs, turn) => {
    const home = driverHome(turn, 'opencode');
    if (turn.systemPrompt !== undefined) await fs.writeFile(below(home, 'instructions.md').rel, `${turn.systemPrompt}\n`, { createParents: true, mode: 0o600 });
    await fs.writeFile(below(home, 'opencode.json').rel, `${JSON.stringify(configOf(turn, home), null, 2)}\n`, { createParents: true, mode: 0o600 });
  },
  command,
  session: (turn) => (turn.twoWay ? acpSession(openCodeAcp) : { kind: 'one-way', start: (t) => runMapper(t) }),
};
