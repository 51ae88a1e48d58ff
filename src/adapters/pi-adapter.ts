/**
 * Pi adapter (driver class `Pi`), measured against `@mariozechner/pi-coding-agent` 0.73.1.
 *
 * One process per turn: `pi -p --mode json --provider P --model M [--session ID] [--append-system-prompt FILE]
 * [--tools read,grep,find,ls]`, the prompt on stdin (a positional prompt starting with `@` or `-` would be
 * taken for a file or a flag). Config lives in `PI_CODING_AGENT_DIR` (`models.json` names the provider, its
 * `baseUrl`, `api` and the NAME of the key's environment variable); `PI_OFFLINE=1` stops startup network calls.
 * Output: a first `session` line (`id`), agent/turn/message lifecycle events, `tool_execution_*`, and a last
 * `agent_end` that ends the turn. A vendor failure does NOT change the exit code (it stays 0): it shows as the
 * last assistant message's `stopReason: "error"` with `errorMessage`.
 *
 * Usage: each assistant `message_end.message.usage` is one model call, already normalised by pi: `input`
 * EXCLUDES cached tokens (measured: prompt_tokens 120 with 20 cached → input 100, cacheRead 20), plus
 * `cacheRead`, `cacheWrite`, `output`. Cost: pi computes `usage.cost.total` from the `cost` table in models.json;
 * it is reported only when the catalog supplied that table (`settings.cost`), else pi would say 0.
 * Pi's `output` includes reasoning tokens (the OpenAI completions count), so `reasoning` stays unknown.
 * Model: `message.model` of the assistant messages.
 * Resume: `--fork ID` continues the session in a NEW session file branched from it, leaving ID as it was, so a
 * retried attempt never feeds its prompt twice (`settings.forkSessions: false` uses `--session ID`, in place).
 *
 * Two-way mode (when the turn's permission gate can deny or ask): `pi --mode rpc` with a gate extension that asks
 * before every tool call (pi-rpc.ts); the session id comes from `get_state`, the rest of the output is the same.
 */
import { z } from 'zod';
import type { PermissionRequest } from '../permissions/types.js';
import { CliHarnessAdapter, type LineState, type TurnCommand, type TurnContext, type WireAnswer } from './cli-adapter.js';
import { answerPiRequest, mapPiRpcLine, piGateExtension, piRpcStdin } from './pi-rpc.js';
import { harnessHome, homePath, parseJsonLine, stringSetting, writeHomeFile, type HarnessHome } from './harness-home.js';
import type { AdapterRegistry } from './registry.js';
import { noUsage, usageOf } from '../contracts/usage.js';
import type { Capabilities, HarnessEvent, HarnessSessionConfig, PermissionPosture, PermissionReport, TerminalEvent, TurnInput } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const piDriverClass = 'Pi';

/** What `pi -p --mode json` really gives. */
export const piCapabilities: Capabilities = {
  sessionResume: true,
  sessionFork: true,
  structuredOutput: false,
  usageReporting: true,
  // Print mode cannot ask; RPC mode with the gate extension does (test/e2e/permissions-live.test.ts).
  permissionHooks: true,
  modelSelection: true,
  systemPrompt: true,
};

/** Provider id the adapter defines in models.json when a base URL is configured. */
export const piProviderId = 'durable';

/** The read-only tool set used to approximate `strict`. */
export const piReadOnlyTools = 'read,grep,find,ls';

const usageSchema = z.object({
  input: z.number().nullish(),
  output: z.number().nullish(),
  cacheRead: z.number().nullish(),
  cacheWrite: z.number().nullish(),
  cost: z.object({ total: z.number().nullish() }).nullish(),
});
const contentPart = z.object({ type: z.string(), text: z.string().nullish(), name: z.string().nullish() });
const message = z.object({
  role: z.string(),
  content: z.union([z.string(), z.array(contentPart)]).nullish(),
  model: z.string().nullish(),
  provider: z.string().nullish(),
  usage: usageSchema.nullish(),
  stopReason: z.string().nullish(),
  errorMessage: z.string().nullish(),
});
const sessionLine = z.object({ type: z.literal('session'), id: z.string() });
const messageUpdateLine = z.object({
  type: z.literal('message_update'),
  assistantMessageEvent: z.object({ type: z.string(), delta: z.string().nullish() }).nullish(),
});
const messageEndLine = z.object({ type: z.literal('message_end'), message });
const toolStartLine = z.object({ type: z.literal('tool_execution_start'), toolName: z.string(), args: z.unknown().nullish() });
const retryLine = z.object({ type: z.literal('auto_retry_start'), attempt: z.number().nullish(), errorMessage: z.string().nullish() });
const agentEndLine = z.object({ type: z.literal('agent_end'), messages: z.array(z.unknown()).nullish() });
const otherLine = z.object({ type: z.string() });
/** Every line `pi --mode json` prints; unknown types fall through to the catch-all. */
export const piLine = z.union([sessionLine, messageUpdateLine, messageEndLine, toolStartLine, retryLine, agentEndLine, otherLine]);
export type PiLine = z.infer<typeof piLine>;

interface Scratch {
  sessionId?: string;
  last?: z.infer<typeof message>;
  /** A model call is under way: from pi's `turn_start` to the assistant's `message_end` (its usage). */
  calling?: boolean;
}

function textOf(m: z.infer<typeof message>): string {
  if (typeof m.content === 'string') return m.content;
  return (m.content ?? []).filter((p) => p.type === 'text').map((p) => p.text ?? '').join('');
}

/** Adapter for Pi. */
export class PiAdapter extends CliHarnessAdapter {
  readonly driverClass = piDriverClass;
  readonly capabilities = piCapabilities;
  protected override readonly harnessLabel = 'pi';
  protected override readonly unknownSessionPattern = /No session found matching/;
  private home: HarnessHome | undefined;
  private reportsCost = false;
  private twoWayTurn = false;

  protected override async prepare(config: HarnessSessionConfig): Promise<void> {
    this.home = harnessHome(config, 'pi');
    const agentDir = homePath(this.home, 'agent');
    const cost = config.settings?.cost;
    this.reportsCost = typeof cost === 'object' && cost !== null;
    if (config.baseUrl && config.model) {
      const providerId = stringSetting(config, 'providerId') ?? piProviderId;
      const models = {
        providers: {
          [providerId]: {
            baseUrl: config.baseUrl,
            api: stringSetting(config, 'api') ?? 'openai-completions',
            // pi resolves a value naming an environment variable to that variable: the key stays in env.
            apiKey: stringSetting(config, 'apiKeyEnv') ?? 'OPENAI_API_KEY',
            compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
            models: [{ id: config.model, name: config.model, ...(this.reportsCost ? { cost } : {}) }],
          },
        },
      };
      writeHomeFile(homePath(agentDir, 'models.json'), `${JSON.stringify(models, null, 2)}\n`);
    }
    writeHomeFile(homePath(agentDir, 'settings.json'), `${JSON.stringify({ enableInstallTelemetry: false }, null, 2)}\n`);
  }

  protected override permissionReport(posture: PermissionPosture): PermissionReport {
    if (posture === 'strict') {
      return {
        posture,
        enforced: true,
        note:
          'Two-way mode (pi --mode rpc with the durable-harness gate extension): EVERY tool call, reads included, is decided ' +
          'by the permission gate (the policy allows reads inside the workspace by itself, then an operator) before it ' +
          `runs, edited input included. Without a gate (print mode has no approvals): only --tools ${piReadOnlyTools}, not enforced.`,
      };
    }
    return { posture, enforced: true, note: `pi runs its tools without asking${posture === 'auto' ? '; with permission rules: the two-way mode, as for strict' : ''}.` };
  }

  protected override buildTurn(input: TurnInput, ctx: TurnContext): TurnCommand {
    const home = this.home ?? harnessHome(ctx.config, 'pi');
    const agentDir = homePath(home, 'agent');
    this.twoWayTurn = ctx.twoWay;
    const argv = ctx.twoWay ? [ctx.config.executable, ...ctx.config.baseArgs, '--mode', 'rpc'] : [ctx.config.executable, ...ctx.config.baseArgs, '-p', '--mode', 'json'];
    if (ctx.config.model) {
      if (ctx.config.baseUrl) argv.push('--provider', stringSetting(ctx.config, 'providerId') ?? piProviderId);
      argv.push('--model', ctx.config.model);
    }
    if (ctx.resumeSessionId) argv.push(ctx.fork ? '--fork' : '--session', ctx.resumeSessionId);
    if (ctx.systemPrompt !== undefined) {
      // `--append-system-prompt` takes a file's contents: the prompt stays out of argv. Every turn: pi does not
      // store the system prompt in the session.
      const file = homePath(home, 'system-prompt.md');
      writeHomeFile(file, `${ctx.systemPrompt}\n`);
      argv.push('--append-system-prompt', file.sandbox);
    }
    if (ctx.posture === 'strict' && !ctx.twoWay) argv.push('--tools', piReadOnlyTools);
    const env: Record<string, string> = { HOME: home.sandbox, PI_CODING_AGENT_DIR: agentDir.sandbox, PI_OFFLINE: '1', PI_TELEMETRY: '0' };
    if (!ctx.twoWay) return { argv, stdin: input.prompt, env };
    const extension = homePath(home, 'durable-harness-gate.js');
    writeHomeFile(extension, piGateExtension);
    argv.push('-e', extension.sandbox);
    return { argv, stdin: piRpcStdin(input.prompt), env, keepStdinOpen: true };
  }

  protected override answerPermission(request: PermissionRequest, answer: WireAnswer, state: LineState): void {
    answerPiRequest(request, answer, state);
  }

  protected override mapLine(line: string, state: LineState): HarnessEvent | HarnessEvent[] | undefined {
    if (this.twoWayTurn) {
      const rpc = mapPiRpcLine(parseJsonLine(line), state);
      if (rpc !== 'agent-event') {
        if (!Array.isArray(rpc) && rpc.type === 'session') (state.scratch as Scratch).sessionId = rpc.sessionId;
        return rpc;
      }
    }
    const parsed = piLine.safeParse(parseJsonLine(line));
    if (!parsed.success) return { type: 'unknown', raw: line };
    const scratch = state.scratch as Scratch;
    const value = parsed.data;
    switch (value.type) {
      case 'session': {
        const id = (value as z.infer<typeof sessionLine>).id;
        scratch.sessionId = id;
        return { type: 'session', sessionId: id };
      }
      case 'message_update': {
        const event = (value as z.infer<typeof messageUpdateLine>).assistantMessageEvent;
        return event?.type === 'text_delta' && event.delta ? { type: 'text', text: event.delta } : undefined;
      }
      case 'message_end':
        return this.messageEnd((value as z.infer<typeof messageEndLine>).message, scratch);
      case 'tool_execution_start': {
        const v = value as z.infer<typeof toolStartLine>;
        return { type: 'activity', description: `${v.toolName} ${JSON.stringify(v.args ?? {})}` };
      }
      case 'auto_retry_start': {
        const v = value as z.infer<typeof retryLine>;
        return { type: 'activity', description: `pi retries the model call (attempt ${v.attempt ?? '?'}): ${v.errorMessage ?? ''}` };
      }
      case 'agent_end':
        return this.agentEnd(scratch);
      case 'turn_start':
        scratch.calling = true;
        return undefined;
      case 'agent_start':
      case 'turn_end':
      case 'message_start':
      case 'tool_execution_update':
      case 'tool_execution_end':
        return undefined;
      default:
        return { type: 'unknown', raw: line };
    }
  }

  private messageEnd(m: z.infer<typeof message>, scratch: Scratch): HarnessEvent[] {
    if (m.role !== 'assistant') return [];
    scratch.last = m;
    scratch.calling = false;
    const events: HarnessEvent[] = [];
    if (scratch.sessionId && m.model) events.push({ type: 'session', sessionId: scratch.sessionId, model: m.model });
    if (m.usage) {
      const usage = usageOf({ input: m.usage.input, output: m.usage.output, cacheRead: m.usage.cacheRead, cacheWrite: m.usage.cacheWrite });
      const cost = this.reportsCost && m.usage.cost?.total != null ? { costUsd: m.usage.cost.total } : {};
      events.push({ type: 'usage', usage, ...cost });
    }
    return events;
  }

  /** A turn cut off during a model call (before its `message_end`): spent, and pi will never say how much. */
  protected override unreportedUsage(state: LineState): HarnessEvent[] {
    return (state.scratch as Scratch).calling ? [{ type: 'usage', usage: noUsage }] : [];
  }

  private agentEnd(scratch: Scratch): TerminalEvent {
    const last = scratch.last;
    if (last && (last.stopReason === 'error' || last.stopReason === 'aborted')) {
      return { type: 'session-error', code: 'vendor-error', message: last.errorMessage ?? `pi's model call ended with stopReason "${last.stopReason}"` };
    }
    return { type: 'turn-complete', text: last ? textOf(last) : '' };
  }
}

/** Registers the Pi adapter. */
export function registerPi(registry: AdapterRegistry): AdapterRegistry {
  return registry.register(piDriverClass, () => new PiAdapter());
}
