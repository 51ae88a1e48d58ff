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
 * Model: the JSON output never names the model, so `reportedModel` stays undefined.
 * Resume: `--session ID --fork` continues the session in a NEW one branched from it, leaving ID as it was, so a
 * retried attempt never feeds its prompt twice (`settings.forkSessions: false` resumes in place).
 */
import { z } from 'zod';
import { CliHarnessAdapter, type LineState, type TurnCommand, type TurnContext } from './cli-adapter.js';
import { harnessHome, homePath, numberSetting, parseJsonLine, stringSetting, writeHomeFile, type HarnessHome } from './harness-home.js';
import type { AdapterRegistry } from './registry.js';
import { usageOf } from '../workflows/usage.js';
import type { Capabilities, HarnessEvent, HarnessSessionConfig, PermissionPosture, PermissionReport, TerminalEvent, TurnInput, Usage } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const openCodeDriverClass = 'OpenCode';

/** What `opencode run --format json` really gives. */
export const openCodeCapabilities: Capabilities = {
  sessionResume: true,
  sessionFork: true,
  structuredOutput: false,
  usageReporting: true,
  // `opencode acp` / `serve` can ask; `run` cannot.
  permissionHooks: false,
  modelSelection: true,
  systemPrompt: true,
};

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
function priceOf(config: HarnessSessionConfig): Record<string, number> | undefined {
  const cost = config.settings?.cost as Record<string, unknown> | undefined;
  if (typeof cost !== 'object' || cost === null) return undefined;
  const num = (v: unknown): number => (typeof v === 'number' ? v : 0);
  return { input: num(cost.input), output: num(cost.output), cache_read: num(cost.cacheRead), cache_write: num(cost.cacheWrite) };
}

/** Adapter for OpenCode. */
export class OpenCodeAdapter extends CliHarnessAdapter {
  readonly driverClass = openCodeDriverClass;
  readonly capabilities = openCodeCapabilities;
  protected override readonly unknownSessionPattern = /Session not found/i;
  private home: HarnessHome | undefined;
  /** OpenCode prices a custom model at 0 unless the catalog gave prices: only then is its cost meaningful. */
  private reportsCost = false;

  protected override async prepare(config: HarnessSessionConfig): Promise<void> {
    this.home = harnessHome(config, 'opencode');
    this.reportsCost = priceOf(config) !== undefined || !config.baseUrl;
    const maxTurnMs = numberSetting(config, 'maxTurnMs') ?? openCodeDefaultMaxTurnMs;
    if (config.turnTimeoutMs > maxTurnMs) this.config = { ...config, turnTimeoutMs: maxTurnMs };
    this.writeConfig(this.config ?? config);
  }

  protected override permissionReport(posture: PermissionPosture): PermissionReport {
    if (this.config) this.writeConfig(this.config);
    const rules = Object.entries(permissions[posture]).map(([k, v]) => `${k}:${v}`).join(', ');
    return { posture, enforced: true, note: `opencode.json permission {${rules}}; denied tools are never run (run mode cannot ask).` };
  }

  override setSystemPrompt(text: string): void {
    super.setSystemPrompt(text);
    if (this.config) this.writeConfig(this.config);
  }

  /** The model argument: our provider's model when a base URL is set, else the catalog's `provider/model`. */
  private modelArg(config: HarnessSessionConfig): string | undefined {
    if (!config.model) return undefined;
    return config.baseUrl ? `${stringSetting(config, 'providerId') ?? openCodeProviderId}/${config.model}` : config.model;
  }

  private writeConfig(config: HarnessSessionConfig): void {
    const home = this.home ?? harnessHome(config, 'opencode');
    const doc: Record<string, unknown> = {
      $schema: 'https://opencode.ai/config.json',
      autoupdate: false,
      share: 'disabled',
      permission: permissions[this.posture],
    };
    const price = priceOf(config);
    if (config.baseUrl && config.model) {
      const providerId = stringSetting(config, 'providerId') ?? openCodeProviderId;
      const apiKeyEnv = stringSetting(config, 'apiKeyEnv') ?? 'OPENAI_API_KEY';
      doc.provider = {
        [providerId]: {
          npm: stringSetting(config, 'npm') ?? '@ai-sdk/openai-compatible',
          name: 'durable-harness vendor',
          // The key stays in the environment: the config only names the variable.
          options: { baseURL: config.baseUrl, apiKey: `{env:${apiKeyEnv}}` },
          models: { [config.model]: { name: config.model, ...(price ? { cost: price } : {}) } },
        },
      };
    }
    const model = this.modelArg(config);
    if (model) {
      doc.model = model;
      doc.small_model = model;
    }
    if (this.systemPrompt !== undefined) {
      const file = homePath(home, 'instructions.md');
      writeHomeFile(file, `${this.systemPrompt}\n`);
      doc.instructions = [file.sandbox];
    }
    writeHomeFile(homePath(home, 'opencode.json'), `${JSON.stringify(doc, null, 2)}\n`);
  }

  protected override buildTurn(input: TurnInput, ctx: TurnContext): TurnCommand {
    const home = this.home ?? harnessHome(ctx.config, 'opencode');
    const argv = [ctx.config.executable, ...ctx.config.baseArgs, 'run', '--format', 'json'];
    const model = this.modelArg(ctx.config);
    if (model) argv.push('-m', model);
    // A given title skips OpenCode's title-generation model call, whose tokens it never reports.
    if (ctx.resumeSessionId) argv.push('--session', ctx.resumeSessionId, ...(ctx.fork ? ['--fork'] : []));
    else argv.push('--title', `durable-harness ${ctx.config.runId}`);
    const env: Record<string, string> = {
      HOME: home.sandbox,
      XDG_CONFIG_HOME: `${home.sandbox}/config`,
      XDG_DATA_HOME: `${home.sandbox}/data`,
      XDG_CACHE_HOME: `${home.sandbox}/cache`,
      XDG_STATE_HOME: `${home.sandbox}/state`,
      OPENCODE_CONFIG: homePath(home, 'opencode.json').sandbox,
      OPENCODE_DISABLE_MODELS_FETCH: '1',
      OPENCODE_DISABLE_AUTOUPDATE: '1',
      // OpenCode installs its plugin package from the npm registry on every start; offline, it uses what it has.
      npm_config_offline: 'true',
    };
    return { argv, stdin: input.prompt, env };
  }

  protected override mapLine(line: string, state: LineState): HarnessEvent | HarnessEvent[] | undefined {
    const parsed = openCodeLine.safeParse(parseJsonLine(line));
    if (!parsed.success) return { type: 'unknown', raw: line };
    const scratch = state.scratch as Scratch;
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
        const cost = this.reportsCost && part.cost != null ? { costUsd: part.cost } : {};
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
  }

  protected override onExit(code: number | null, _stderrTail: string, state: LineState): TerminalEvent | undefined {
    const scratch = state.scratch as Scratch;
    // A last step that ended for another reason than `stop` (e.g. `length`) still ends the turn.
    if (code === 0 && scratch.open === false && scratch.lastReason !== 'tool-calls') return { type: 'turn-complete', text: scratch.text ?? '' };
    return undefined;
  }
}

/** Registers the OpenCode adapter. */
export function registerOpenCode(registry: AdapterRegistry): AdapterRegistry {
  return registry.register(openCodeDriverClass, () => new OpenCodeAdapter());
}
