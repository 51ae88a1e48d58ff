/**
 * Shared by the two-way recorder (test/fixtures/record-two-way.ts) and the live permission tests: how each real
 * CLI is configured, how its two-way mode behaves on a denial, and an executor that keeps the whole
 * conversation (stdout lines and stdin writes, in order).
 */
import { driverSession, type DriverSession, type HarnessSessionConfig } from '../../support/driver-session.js';
import { claudeCode } from '../../../src/adapters/claude-code-adapter.js';
import { codex } from '../../../src/adapters/codex-adapter.js';
import { geminiCli } from '../../../src/adapters/gemini-cli-adapter.js';
import { openCode } from '../../../src/adapters/opencode-adapter.js';
import { pi } from '../../../src/adapters/pi-adapter.js';
import type { PermissionAnswer, PermissionGate, PermissionRequest } from '../../../src/permissions/types.js';
import type { ExecProcess, ExecRequest, SandboxExecutor } from '../../../src/sandbox/types.js';
import type { FakeVendor, ScriptedReply } from '../fake-vendor/server.js';
import { baseUrlFor, shellCall, writeCall, type CliName } from '../fake-vendor/tool-calls.js';
import { cliBinary } from './clis.js';

export interface CliProfile {
  readonly create: () => DriverSession;
  readonly model: string;
  readonly keyEnv: string;
  readonly settings?: Record<string, unknown>;
  readonly env?: Record<string, string>;
  /** After a denied tool the CLI goes on with the same prompt (else it ends the prompt: OpenCode). */
  readonly continuesAfterDeny: boolean;
  /** The model sees the denial's reason in the CLI's own protocol (else: a follow-up prompt). */
  readonly nativeDenyMessage: boolean;
  /** The CLI runs an edited input itself (else: denied, the model is told, and asks again). */
  readonly nativeEdit: boolean;
}

export const cliProfiles: Record<CliName, CliProfile> = {
  claude: { create: () => driverSession(claudeCode), model: 'claude-sonnet-4-5', keyEnv: 'ANTHROPIC_API_KEY', settings: { maxRetries: 0 }, continuesAfterDeny: true, nativeDenyMessage: true, nativeEdit: true },
  codex: { create: () => driverSession(codex), model: 'gpt-5.5', keyEnv: 'OPENAI_API_KEY', continuesAfterDeny: true, nativeDenyMessage: false, nativeEdit: false },
  gemini: { create: () => driverSession(geminiCli), model: 'gemini-2.5-flash', keyEnv: 'GEMINI_API_KEY', continuesAfterDeny: true, nativeDenyMessage: false, nativeEdit: false },
  opencode: { create: () => driverSession(openCode), model: 'fake-model', keyEnv: 'OPENAI_API_KEY', env: { npm_config_offline: 'true' }, continuesAfterDeny: false, nativeDenyMessage: false, nativeEdit: false },
  pi: { create: () => driverSession(pi), model: 'fake-model', keyEnv: 'OPENAI_API_KEY', continuesAfterDeny: true, nativeDenyMessage: true, nativeEdit: true },
};

/** The session config for `cli` against `vendor`; `wrap` puts a command (strace) in front of the binary. */
export function cliSessionConfig(
  cli: CliName,
  workspace: string,
  vendor: FakeVendor,
  executor: SandboxExecutor,
  key: string,
  extra: Partial<HarnessSessionConfig> & { wrap?: string[] } = {},
): HarnessSessionConfig {
  const profile = cliProfiles[cli];
  const bin = cliBinary(cli);
  const { wrap = [], ...rest } = extra;
  return {
    runId: `two-way-${cli}`,
    harnessName: cli,
    executable: wrap.length > 0 ? wrap[0]! : bin,
    baseArgs: wrap.length > 0 ? [...wrap.slice(1), bin] : [],
    model: profile.model,
    workspacePath: workspace,
    hostWorkspacePath: workspace,
    env: { ...profile.env, [profile.keyEnv]: key },
    executor,
    baseUrl: baseUrlFor(cli, vendor),
    turnTimeoutMs: 90_000,
    ...(profile.settings ? { settings: profile.settings } : {}),
    ...rest,
  };
}

/** A gate that answers from a script, in order, and remembers what it was asked. */
export class ScriptedGate implements PermissionGate {
  readonly interactive = true;
  readonly asked: PermissionRequest[] = [];
  constructor(private readonly answers: (Omit<PermissionAnswer, 'scope' | 'decidedBy'> & { decidedBy?: string })[]) {}

  async decide(request: PermissionRequest): Promise<PermissionAnswer> {
    this.asked.push(request);
    const next = this.answers.shift();
    if (!next) throw new Error(`ScriptedGate: no answer left for ${request.tool} ${request.title}`);
    return { scope: 'once', decidedBy: 'script', ...next };
  }
}

/** One stdin write, after how many stdout lines the adapter had read. */
export interface RecordedWrite {
  readonly after: number;
  readonly line: string;
}

/** One process's conversation. */
export interface Transcript {
  readonly request: ExecRequest;
  readonly lines: string[];
  readonly writes: RecordedWrite[];
  exit?: { code: number | null; signal: string | null };
  stderr: string;
}

/** Wraps an executor and keeps each process's stdout lines and stdin writes in order. */
export class TranscriptExecutor implements SandboxExecutor {
  readonly transcripts: Transcript[] = [];
  constructor(private readonly inner: SandboxExecutor) {}

  exec(request: ExecRequest): ExecProcess {
    const proc = this.inner.exec(request);
    const transcript: Transcript = { request, lines: [], writes: [], stderr: '' };
    this.transcripts.push(transcript);
    const record = (text: string): void => {
      for (const line of text.split('\n')) if (line !== '') transcript.writes.push({ after: transcript.lines.length, line });
    };
    if (request.stdin !== undefined) record(request.stdin);
    void proc.exit.then((exit) => {
      transcript.exit = exit;
      transcript.stderr = proc.stderrTail();
    });
    async function* tee(): AsyncGenerator<string> {
      for await (const line of proc.lines) {
        transcript.lines.push(line);
        yield line;
      }
    }
    return {
      lines: tee(),
      exit: proc.exit,
      stderrTail: () => proc.stderrTail(),
      write: (text) => {
        record(text);
        proc.write(text);
      },
      closeStdin: () => proc.closeStdin?.(),
      kill: () => proc.kill(),
      pid: proc.pid,
    };
  }
}

export const envelope = (result: string): string => JSON.stringify({ step: 'success', result });
const u = (input: number, output: number, cacheRead = 0) => ({ input, output, cacheRead });

/**
 * What the scripted model says in each permission scenario, for this CLI's behaviour on denials:
 * - `allow`: `touch ran.txt`, then write out.txt, then the envelope `done`;
 * - `deny` (also a timeout): the same two requests, refused; the model ends with an envelope (and, where the CLI
 *   cannot carry the reason, answers the follow-up prompt with `understood`);
 * - `edit`: `touch ran.txt`, edited by the operator to `touch edited.txt`; where the CLI cannot take the edit the
 *   model is told and asks again with the edited command.
 */
export function permissionReplies(cli: CliName, workspace: string, scenario: 'allow' | 'deny' | 'edit'): ScriptedReply[] {
  const p = cliProfiles[cli];
  const shell = (command: string, id: string, usage: ScriptedReply['usage']): ScriptedReply => ({ toolCalls: [shellCall(cli, command, id)], usage });
  const write: ScriptedReply = { toolCalls: [writeCall(cli, workspace, 'out.txt', 'hello')], usage: u(200, 20) };
  switch (scenario) {
    case 'allow':
      return [shell('touch ran.txt', 'call_shell_1', u(100, 10, 20)), write, { text: envelope('done'), usage: u(300, 30) }];
    case 'deny':
      return p.continuesAfterDeny
        ? [
            shell('touch ran.txt', 'call_shell_1', u(100, 10)),
            write,
            { text: envelope('could not'), usage: u(300, 30) },
            ...(p.nativeDenyMessage ? [] : [{ text: envelope('understood'), usage: u(400, 40) }]),
          ]
        : [shell('touch ran.txt', 'call_shell_1', u(100, 10)), write, { text: envelope('understood'), usage: u(300, 30) }];
    case 'edit':
      return p.nativeEdit
        ? [shell('touch ran.txt', 'call_shell_1', u(100, 10)), { text: envelope('edited ran'), usage: u(200, 20) }]
        : [
            shell('touch ran.txt', 'call_shell_1', u(100, 10)),
            ...(p.continuesAfterDeny ? [{ text: 'It was not allowed.', usage: u(150, 15) }] : []),
            shell('touch edited.txt', 'call_shell_2', u(200, 20)),
            { text: envelope('edited ran'), usage: u(300, 30) },
          ];
  }
}

/** A session id each CLI has never seen, in its own id format. */
export const missingSessionIds: Record<CliName, string> = {
  claude: '00000000-0000-4000-8000-000000000000',
  codex: '00000000-0000-7000-8000-000000000000',
  gemini: '00000000-0000-4000-8000-000000000000',
  opencode: 'ses_000000000000unknownsession',
  pi: '00000000-0000-4000-8000-000000000000',
};
