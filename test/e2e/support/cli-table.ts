/**
 * The five pinned CLIs as one table, for the per-CLI live and workflow tests (test/e2e/cli-live.test.ts,
 * test/e2e/cli-workflow.test.ts): how each is driven against the fake vendor, and what it is expected to report.
 */
import path from 'node:path';
import { claudeCode } from '../../../src/adapters/claude-code-adapter.js';
import { codex } from '../../../src/adapters/codex-adapter.js';
import { profiles } from '../../fixtures/record-more.js';
import { driverSession, type DriverSession } from '../../support/driver-session.js';
import type { FakeVendor, RecordedRequest } from '../fake-vendor/server.js';
import { cliBinary, startVendorFor } from './clis.js';

export interface TableCli {
  readonly name: 'claude' | 'codex' | 'gemini' | 'opencode' | 'pi';
  readonly driverClass: string;
  /** The catalog's vendor name. */
  readonly vendor: string;
  readonly executable: string;
  readonly model: string;
  readonly keyEnv: string;
  readonly create: () => DriverSession;
  /** A fake vendor on 127.0.0.1 that speaks this CLI's API. */
  readonly startVendor: () => Promise<FakeVendor>;
  /** The vendor requests that are the turn's model calls (not side calls such as titles, routing or `HEAD /`). */
  readonly match: (request: RecordedRequest) => boolean;
  /** The CLI's own file-read tool call for `notes.txt`. */
  readonly readCall: (workspace: string) => { name: string; input: Record<string, unknown> };
  readonly baseUrl: (vendor: FakeVendor) => string;
  /** Driver settings beyond the key variable. */
  readonly settings: Record<string, unknown>;
  /** Non-secret process environment from the catalog. */
  readonly env: Record<string, string>;
  /** The model the CLI says it used; codex and OpenCode never name it. */
  readonly reportedModel: string | undefined;
  /** The request body names the model (Gemini's URL does). */
  readonly modelInBody: boolean;
  /** Resumed turns fork the session (a new session id per turn); Gemini resumes in place. */
  readonly forks: boolean;
  /** The CLI reports its own cost always (claude's `total_cost_usd`). */
  readonly reportsCost: boolean;
  /** The CLI computes its own cost from `settings.cost` (OpenCode, Pi). */
  readonly pricesItself: boolean;
  /** What turn 1 reports as cache writes when the vendor says 350 (the Responses API has no such count: 0); `undefined`: not scripted. */
  readonly cacheWrite: number | undefined;
}

const post = (request: RecordedRequest): boolean => request.method === 'POST';

export const clis: readonly TableCli[] = [
  {
    name: 'claude', driverClass: 'ClaudeCode', vendor: 'anthropic', executable: cliBinary('claude'), model: 'claude-sonnet-4-5', keyEnv: 'ANTHROPIC_API_KEY',
    create: () => driverSession(claudeCode), startVendor: () => startVendorFor('claude'), match: post,
    readCall: (workspace) => ({ name: 'Read', input: { file_path: path.join(workspace, 'notes.txt') } }),
    baseUrl: (vendor) => vendor.url, settings: { maxRetries: 0 }, env: {},
    reportedModel: 'claude-sonnet-4-5', modelInBody: true, forks: true, reportsCost: true, pricesItself: false, cacheWrite: 350,
  },
  {
    name: 'codex', driverClass: 'Codex', vendor: 'openai', executable: cliBinary('codex'), model: 'gpt-5.5', keyEnv: 'OPENAI_API_KEY',
    create: () => driverSession(codex), startVendor: () => startVendorFor('codex'), match: post,
    readCall: () => ({ name: 'exec_command', input: { cmd: 'cat notes.txt' } }),
    baseUrl: (vendor) => vendor.url, settings: {}, env: {},
    reportedModel: undefined, modelInBody: true, forks: true, reportsCost: false, pricesItself: false, cacheWrite: 0,
  },
  {
    name: 'gemini', driverClass: 'GeminiCli', vendor: 'google', ...fromProfile('gemini'), settings: {}, env: {},
    reportedModel: profiles.gemini.model, modelInBody: false, forks: false, reportsCost: false, pricesItself: false, cacheWrite: undefined,
  },
  {
    name: 'opencode', driverClass: 'OpenCode', vendor: 'openai', ...fromProfile('opencode'), settings: {},
    // OpenCode 1.18.33 npm-installs @opencode-ai/plugin into its config dir in the background at every start
    // (strace: DNS for registry.npmjs.org, then a TLS connect); npm's offline mode stops it.
    env: { npm_config_offline: 'true' },
    reportedModel: undefined, modelInBody: true, forks: true, reportsCost: false, pricesItself: true, cacheWrite: undefined,
  },
  {
    name: 'pi', driverClass: 'Pi', vendor: 'openai', ...fromProfile('pi'), settings: {}, env: {},
    reportedModel: profiles.pi.model, modelInBody: true, forks: true, reportsCost: false, pricesItself: true, cacheWrite: undefined,
  },
];

function fromProfile(name: keyof typeof profiles) {
  const p = profiles[name];
  return { executable: p.executable, model: p.model, keyEnv: p.keyEnv, create: p.create, startVendor: p.vendor, match: p.match, readCall: p.readToolCall, baseUrl: p.baseUrl };
}

/**
 * `cli`'s harness entry of a test catalog against `vendor`: its driver, model, key variable, base URL and settings;
 * `overrides` adds or replaces fields (the executable in a container, strace, prices).
 */
export function cliHarness(cli: TableCli, vendor: FakeVendor, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: cli.name,
    driverClass: cli.driverClass,
    vendor: cli.vendor,
    model: cli.model,
    apiKeyEnv: cli.keyEnv,
    executable: cli.executable,
    active: true,
    baseUrl: cli.baseUrl(vendor),
    turnTimeoutMs: 60_000,
    settings: { apiKeyEnv: cli.keyEnv, ...cli.settings },
    env: cli.env,
    ...overrides,
  };
}
