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
 * before every tool call (two-way/pi-rpc.ts); the session id comes from `get_state`, the rest of the output is the same.
 */
import { z } from 'zod';
import type { DriverCommand, DriverTurn, HarnessDriver, LineMapper } from './driver.js';
import { below, cliCapabilities, driverHome, parseJsonLine, resumeFailedOnExit, stringSetting } from './kit.js';
import { piGateExtension, piRpcSession } from './two-way/pi-rpc.js';
import { noUsage, usageOf } from '../contracts/usage.js';
import type { HarnessEvent, PermissionPosture, PermissionReport, TerminalEvent } from './types.js';

/** The driver class name catalogs use for this adapter. */
export const piDriverClass = 'Pi';

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

const names = { label: 'pi' };
const unknownSession = /No session found matching/;

/** Pi computes a cost from the models.json table: meaningful only when the catalog supplied that table. */
function reportsCost(turn: DriverTurn): boolean {
  const cost = turn.settings.cost;
  return typeof cost === 'object' && cost !== null;
}

function permissions(posture: PermissionPosture): PermissionReport {
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

function command(turn: DriverTurn): DriverCommand {
  const home = driverHome(turn, 'pi');
  const agentDir = below(home, 'agent');
  const argv = turn.twoWay ? [turn.executable, ...turn.baseArgs, '--mode', 'rpc'] : [turn.executable, ...turn.baseArgs, '-p', '--mode', 'json'];
  if (turn.model) {
    if (turn.baseUrl) argv.push('--provider', stringSetting(turn, 'providerId') ?? piProviderId);
    argv.push('--model', turn.model);
  }
  if (turn.resumeSessionId) argv.push(turn.fork ? '--fork' : '--session', turn.resumeSessionId);
  // `--append-system-prompt` takes a file's contents (written by `prepare`): the prompt stays out of argv. Every
  // turn: pi does not store the system prompt in the session.
  if (turn.systemPrompt !== undefined) argv.push('--append-system-prompt', below(home, 'system-prompt.md').path);
  if (turn.posture === 'strict' && !turn.twoWay) argv.push('--tools', piReadOnlyTools);
  const env: Record<string, string> = { HOME: home.path, PI_CODING_AGENT_DIR: agentDir.path, PI_OFFLINE: '1', PI_TELEMETRY: '0' };
  if (!turn.twoWay) return { argv, stdin: turn.prompt, env };
  argv.push('-e', below(home, 'durable-harness-gate.js').path);
  return { argv, env, keepStdinOpen: true };
}

/** One turn of pi's JSON events (print mode, and RPC mode's agent events). */
function piMapper(turn: DriverTurn): LineMapper {
  const scratch: Scratch = {};
  const withCost = reportsCost(turn);
  const messageEnd = (m: z.infer<typeof message>): HarnessEvent[] => {
    if (m.role !== 'assistant') return [];
    scratch.last = m;
    scratch.calling = false;
    const events: HarnessEvent[] = [];
    if (scratch.sessionId && m.model) events.push({ type: 'session', sessionId: scratch.sessionId, model: m.model });
    if (m.usage) {
      const usage = usageOf({ input: m.usage.input, output: m.usage.output, cacheRead: m.usage.cacheRead, cacheWrite: m.usage.cacheWrite });
      const cost = withCost && m.usage.cost?.total != null ? { costUsd: m.usage.cost.total } : {};
      events.push({ type: 'usage', usage, ...cost });
    }
    return events;
  };
  const agentEnd = (): TerminalEvent => {
    const last = scratch.last;
    if (last && (last.stopReason === 'error' || last.stopReason === 'aborted')) {
      return { type: 'session-error', code: 'vendor-error', message: last.errorMessage ?? `pi's model call ended with stopReason "${last.stopReason}"` };
    }
    return { type: 'turn-complete', text: last ? textOf(last) : '' };
  };
  return {
    line: (line) => {
      const parsed = piLine.safeParse(parseJsonLine(line));
      if (!parsed.success) return { type: 'unknown', raw: line };
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
          return messageEnd((value as z.infer<typeof messageEndLine>).message);
        case 'tool_execution_start': {
          const v = value as z.infer<typeof toolStartLine>;
          return { type: 'activity', description: `${v.toolName} ${JSON.stringify(v.args ?? {})}` };
        }
        case 'auto_retry_start': {
          const v = value as z.infer<typeof retryLine>;
          return { type: 'activity', description: `pi retries the model call (attempt ${v.attempt ?? '?'}): ${v.errorMessage ?? ''}` };
        }
        case 'agent_end':
          return agentEnd();
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
    },
    exit: (code, stderrTail) => resumeFailedOnExit(names, unknownSession, turn, code, stderrTail),
    /** A turn cut off during a model call (before its `message_end`): spent, and pi will never say how much. */
    unreported: () => (scratch.calling ? [{ type: 'usage', usage: noUsage }] : []),
  };
}

/** The two-way mode: `pi --mode rpc`, its agent events mapped as in `--mode json`. */
const piTwoWay = piRpcSession({ agentEvents: piMapper, exit: (turn, code, stderrTail) => resumeFailedOnExit(names, unknownSession, turn, code, stderrTail) });

/** The Pi driver (`pi -p --mode json`; two-way: `pi --mode rpc` with the gate extension). */
export const pi: HarnessDriver = {
  specificationVersion: 'v2',
  driverClass: piDriverClass,
  // Permission hooks: print mode cannot ask; RPC mode with the gate extension does (test/e2e/permissions-live.test.ts).
  capabilities: cliCapabilities({ sessionFork: true }),
  vendor: { api: 'any', baseUrl: { config: 'agent/models.json:providers.durable.baseUrl' }, apiKey: { config: 'agent/models.json:providers.durable.apiKey' } },
  // Pi has no MCP client of its own.
  mcp: undefined,
  permissions,
  prepare: async (fs, turn) => {
    const home = driverHome(turn, 'pi');
    const agentDir = below(home, 'agent');
    const write = (file: string, content: string) => fs.writeFile(file, content, { createParents: true, mode: 0o600 });
    if (turn.baseUrl && turn.model) {
      const providerId = stringSetting(turn, 'providerId') ?? piProviderId;
      const models = {
        providers: {
          [providerId]: {
            baseUrl: turn.baseUrl,
            api: stringSetting(turn, 'api') ?? 'openai-completions',
            // pi resolves a value naming an environment variable to that variable: the key stays in env.
            apiKey: stringSetting(turn, 'apiKeyEnv') ?? 'OPENAI_API_KEY',
            compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
            models: [{ id: turn.model, name: turn.model, ...(reportsCost(turn) ? { cost: turn.settings.cost } : {}) }],
          },
        },
      };
      await write(below(agentDir, 'models.json').rel, `${JSON.stringify(models, null, 2)}\n`);
    }
    await write(below(agentDir, 'settings.json').rel, `${JSON.stringify({ enableInstallTelemetry: false }, null, 2)}\n`);
    if (turn.systemPrompt !== undefined) await write(below(home, 'system-prompt.md').rel, `${turn.systemPrompt}\n`);
    if (turn.twoWay) await write(below(home, 'durable-harness-gate.js').rel, piGateExtension);
  },
  command,
  session: (turn) => (turn.twoWay ? piTwoWay : { kind: 'one-way', start: (t) => piMapper(t) }),
};
