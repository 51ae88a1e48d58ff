/** The catalog: harnesses, agents and actions, validated by zod. */
import { z } from 'zod';
import { GIT_REF_NAME, GIT_REF_NAME_RULE } from '../contracts/repository.js';
import { DEFAULT_MAX_ACTIONS_PER_ENVELOPE, MAX_ACTIONS_PER_ENVELOPE_LIMIT } from '../envelope/parse.js';
import { agentPermissionsSchema, policyFor } from '../permissions/policy.js';

const name = z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, 'use lowercase letters, digits, ".", "_" or "-"');

export const capabilitiesSchema = z.strictObject({
  sessionResume: z.boolean().optional(),
  sessionFork: z.boolean().optional(),
  permissionHooks: z.boolean().optional(),
  systemPrompt: z.boolean().optional(),
});

/**
 * Capability flags catalogs could once set, which nothing ever read: a catalog that still sets one is told so
 * (instead of "unknown field"), with what replaced it.
 */
export const removedCapabilities: Readonly<Record<string, string>> = {
  structuredOutput: 'the envelope is always parsed from the final text, with the malformed-envelope feedback loop',
  usageReporting: 'usage is whatever the harness reports; a turn without usage is cost-blind by itself',
  modelSelection: 'every driver passes `model` to its CLI',
};

/** USD per million tokens. */
export const pricesSchema = z.strictObject({
  input: z.number().nonnegative(),
  output: z.number().nonnegative(),
  cacheRead: z.number().nonnegative().default(0),
  cacheWrite: z.number().nonnegative().default(0),
});

export const harnessSchema = z.strictObject({
  name,
  /** Adapter registered under this driver class (e.g. `StdioJson`, `ClaudeCode`). */
  driverClass: z.string().min(1),
  /** Executable name on PATH or absolute path; relative paths resolve from the catalog file. */
  executable: z.string().min(1),
  args: z.array(z.string()).default([]),
  active: z.boolean().default(false),
  vendor: name,
  model: z.string().min(1),
  capabilities: capabilitiesSchema.optional(),
  prices: pricesSchema.optional(),
  /** Environment variable that carries the vendor key into the harness process. */
  apiKeyEnv: z.string().regex(/^[A-Z_][A-Z0-9_]*$/).optional(),
  baseUrl: z.string().url().optional(),
  /** Non-secret environment for the harness process. */
  env: z.record(z.string(), z.string()).default({}),
  turnTimeoutMs: z.number().int().positive().default(10 * 60_000),
  /** Replies above this many bytes are refused: the harness gets a feedback turn, the operator an error. */
  maxReplyBytes: z.number().int().positive().default(4 * 1024 * 1024),
  settings: z.record(z.string(), z.unknown()).optional(),
});

export const guardrailsSchema = z.strictObject({
  maxIterations: z.number().int().positive().default(20),
  maxTokens: z.number().int().positive().default(2_000_000),
  maxCostUsd: z.number().positive().default(5),
  maxWallTimeMs: z.number().int().positive().default(60 * 60_000),
  /** How deep sub-agents may nest below this run (its run tree's root sets it for the whole tree): 0 = none. */
  maxSubAgentDepth: z.number().int().nonnegative().default(3),
});

/** One allowlisted destination (contracts/network.ts `AllowRule`). */
export const allowRuleSchema = z.strictObject({
  host: z.string().min(1).max(253).regex(/^[A-Za-z0-9.-]+$|^\[[0-9A-Fa-f:.]+\]$/, 'a host name or an IP address, without scheme, port or path'),
  port: z.number().int().min(1).max(65535),
  /** HTTP methods allowed on plain HTTP (e.g. ["GET", "HEAD"]); a rule with methods allows no tunnel (CONNECT). */
  methods: z.array(z.string().regex(/^[A-Z]+$/, 'an HTTP method in capitals, e.g. GET')).min(1).optional(),
});

export const sandboxSchema = z.strictObject({
  provider: z.string().default('local'),
  /** `parent`: a sub-agent works in its parent run's workspace (and sandbox). */
  workspaceScope: z.enum(['run', 'agent', 'agent-user', 'parent']).default('run'),
  /**
   * What the sandbox may reach (docs/network.md): `none`, `vendor` (the model API only, through the run's egress
   * gateway), `allowlist` (the vendor plus `allowlist`), `open` (unconfined: development only). Default: `vendor`
   * for the five CLI drivers, `open` for a stdio-JSON harness (the author's own program; set it).
   */
  networkPolicy: z
    .enum(['none', 'vendor', 'allowlist', 'open'], {
      error: (issue) =>
        issue.input === 'mcp-only'
          ? '"mcp-only" was removed: nothing ever enforced it. Use "vendor" (the model API only, through the egress gateway) or "allowlist" with sandbox.allowlist'
          : `use "none", "vendor", "allowlist" or "open" (got ${JSON.stringify(issue.input)})`,
    })
    .optional(),
  /** Destinations besides the vendor under policy `allowlist`: host, port, and for plain HTTP the methods allowed. */
  allowlist: z.array(allowRuleSchema).optional(),
  options: z.record(z.string(), z.unknown()).optional(),
  /**
   * Shared workspaces (`agent`, `agent-user`): one run at a time works in one. `wait` (default): a second run's turn
   * waits until the first run ends, and `status` says so; `refuse`: the second run fails at once (`WorkspaceBusy`).
   */
  concurrentRuns: z.enum(['wait', 'refuse']).optional(),
  /**
   * Host-bound workspaces (local provider): how long a turn may wait for the worker that holds the workspace
   * before that host counts as gone (default 10 minutes), and what then: `await-operator` (default: the run waits
   * for an operator to retry or abandon) or `reprovision` (a fresh workspace on another worker, conversation
   * replayed). See docs/multi-host.md.
   */
  hostLossTimeoutMs: z.number().int().positive().optional(),
  onHostLoss: z.enum(['reprovision', 'await-operator']).optional(),
});

/** A resource the MCP loopback serves (contracts/loopback.ts `HostResource`): an exact URI and where its text is. */
const resourceUri = z.string().min(3).max(500).regex(/^[a-z][a-z0-9+.-]*:\S+$/, 'a URI with a scheme, e.g. docs://style-guide (no spaces)');
const hostPath = z.string().min(1).refine((p) => p.startsWith('/'), 'an absolute path on the worker');
const resourceBase = { uri: resourceUri, description: z.string().max(1000).optional(), mimeType: z.string().max(100).optional() };
export const hostResourceSchema = z.union([
  z.strictObject({ ...resourceBase, text: z.string().max(1024 * 1024) }),
  z.strictObject({ ...resourceBase, file: hostPath }),
  z.strictObject({ ...resourceBase, uri: resourceUri.refine((u) => u.endsWith('/'), 'a root resource\'s URI ends with "/" (each file is the URI followed by its relative path)'), root: hostPath }),
  z.strictObject({
    ...resourceBase,
    mcp: z.strictObject({
      url: z.url({ protocol: /^https?$/, error: 'the MCP server\'s streamable-HTTP URL (http:// or https://)' }),
      uri: resourceUri.optional(),
      bearerEnv: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, 'a variable of the worker\'s environment, UPPER_SNAKE_CASE').optional(),
    }),
  }),
]);

/**
 * The MCP loopback (docs/mcp.md): read-only tools over the run's own data, and the resources registered here, served
 * mid-turn by the run's egress gateway (network policy `vendor` or `allowlist`) with a per-run token.
 */
export const loopbackSchema = z.strictObject({
  enabled: z.boolean().default(true),
  resources: z.array(hostResourceSchema).max(100).default([]),
  maxReadBytes: z.number().int().min(1024).max(1024 * 1024).optional(),
  maxCallsPerTurn: z.number().int().min(1).max(10_000).optional(),
  maxBytesPerTurn: z.number().int().min(1024).max(64 * 1024 * 1024).optional(),
  callTimeoutMs: z.number().int().min(100).max(60_000).optional(),
});

/** A grant: the harness process receives `env`, read from the credential store or the server variable `from`. */
export const credentialGrantSchema = z.strictObject({
  env: z.string().regex(/^[A-Z_][A-Z0-9_]*$/, 'environment variable names are UPPER_SNAKE_CASE'),
  from: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).optional(),
});

/** A git ref or branch name as the worker accepts one: no option-like start, no `..`, no control characters. */
const gitRefName = z.string().regex(GIT_REF_NAME, `a git ref name of at most 200 characters: ${GIT_REF_NAME_RULE}`);

/**
 * A run on a git repository (docs/repositories.md): the worker checks the source out into the run's workspace on a
 * new branch and, when the run ends as `deliverOn` says, commits the work there (and pushes it, and opens a pull
 * request, as `deliver` says). The source and ref are defaults a start input may override (`sources`).
 */
export const repositorySchema = z.strictObject({
  /** A remote URL (https, ssh, git, file) or an absolute path on the worker's host. No credentials in it: use `credential`. */
  source: z.string().min(1).max(2_000).optional(),
  /** A branch, tag or commit to start from (default `HEAD`). */
  ref: gitRefName.optional(),
  /** Sources a start input may name besides `source`: exact sources, or prefixes ending in `/`. */
  sources: z.array(z.string().min(1).max(2_000)).max(100).default([]),
  /** The run's branch is `<branchPrefix>/<workflow id>` unless the start input names one. */
  branchPrefix: gitRefName.default('durable-harness'),
  deliver: z.enum(['commit', 'push', 'pull-request']).default('commit'),
  deliverOn: z.array(z.enum(['succeeded', 'failed', 'stopped', 'cancelled'])).min(1).default(['succeeded']),
  author: z.strictObject({ name: z.string().min(1).max(200), email: z.string().min(3).max(200) }).default({ name: 'durable-harness', email: 'durable-harness@localhost' }),
  /** Files above this size are refused by name (the deliverable is not made). */
  maxFileBytes: z.number().int().min(1).max(1024 * 1024 * 1024).default(10 * 1024 * 1024),
  /** A patch above this size is refused (the ledger keeps the patch). */
  maxPatchBytes: z.number().int().min(1024).max(256 * 1024 * 1024).default(32 * 1024 * 1024),
  /** The worker's credential (by name in its credential store) for fetching and pushing over https; never in the sandbox. */
  credential: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).optional(),
  /** With `deliver: pull-request`: where the pull request goes. */
  pullRequest: z
    .strictObject({
      /** `owner/name` on GitHub (default: from the source URL). */
      repository: z.string().regex(/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/, 'owner/name').optional(),
      /** The branch it merges into (default: the ref, when it names a branch; else `main`). */
      base: gitRefName.optional(),
      /** The GitHub REST API (default https://api.github.com; GitHub Enterprise: https://HOST/api/v3). */
      apiUrl: z.url().optional(),
      /** The credential (by name) for the API; default `credential`. */
      credential: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/).optional(),
    })
    .optional(),
});

export const agentActionSchema = z.strictObject({
  name,
  maxExecutionsPerRun: z.number().int().positive().optional(),
});

export const agentSchema = z.strictObject({
  name,
  description: z.string().default(''),
  harness: name,
  systemPrompt: z.string().default(''),
  sandbox: sandboxSchema.default({ provider: 'local', workspaceScope: 'run' }),
  /**
   * The permission posture (`strict` | `auto` | `dangerous`), or a policy block
   * `{ posture, allow, deny, ask, approvalTimeoutMs, advisory }` (src/permissions/policy.ts, docs/permissions.md).
   */
  permissions: agentPermissionsSchema.default(() => policyFor('auto')),
  guardrails: guardrailsSchema.default({ maxIterations: 20, maxTokens: 2_000_000, maxCostUsd: 5, maxWallTimeMs: 3_600_000, maxSubAgentDepth: 3 }),
  actions: z
    .array(z.union([name.transform((n): { name: string; maxExecutionsPerRun?: number } => ({ name: n })), agentActionSchema]))
    .default([]),
  subAgents: z.array(name).default([]),
  credentials: z.array(credentialGrantSchema).default([]),
  /** Malformed envelopes in a row before the run fails. */
  maxMalformedTurns: z.number().int().nonnegative().default(3),
  /** Action calls one envelope may ask for; an envelope asking for more runs none of them and gets feedback. */
  maxActionsPerEnvelope: z
    .number()
    .int()
    .positive()
    .max(MAX_ACTIONS_PER_ENVELOPE_LIMIT, `at most ${MAX_ACTIONS_PER_ENVELOPE_LIMIT}: every call of an envelope travels through workflow history`)
    .default(DEFAULT_MAX_ACTIONS_PER_ENVELOPE),
  chatTimeoutMs: z.number().int().positive().default(24 * 3_600_000),
  operatorTimeoutMs: z.number().int().positive().default(24 * 3_600_000),
  /** Attempts of one turn before the run waits for an operator. */
  turnAttempts: z.number().int().positive().default(3),
  /**
   * How often (ms) a turn in flight may update the run's current details in the Temporal UI (activity, tokens,
   * attempt): one signal to the run, 4 history events, per interval in which something changed. Default 10 s.
   */
  progressIntervalMs: z.number().int().min(1_000, 'at least 1000 ms: each progress note costs the run 4 history events').optional(),
  /**
   * For a harness that cannot resume its session: the replayed conversation's size per turn, in tokens (~4
   * characters each). Over it, the task and the most recent whole turns stay verbatim and the turns between them
   * become a labelled digest. Default `DEFAULT_REPLAY_MAX_TOKENS` (24,000).
   */
  replayMaxTokens: z.number().int().min(1_000).optional(),
  /** The MCP loopback (docs/mcp.md); absent = off. */
  loopback: loopbackSchema.optional(),
  /** A run on a git repository and what it delivers (docs/repositories.md); absent = a plain workspace. */
  repository: repositorySchema.optional(),
});

export const actionSchema = z.strictObject({
  name,
  /** Built-in implementation key (see src/actions); defaults to the action's name. */
  implementation: z.string().optional(),
  description: z.string().optional(),
  maxExecutionsPerRun: z.number().int().positive().optional(),
  settings: z.record(z.string(), z.unknown()).optional(),
});

export const catalogSchema = z.strictObject({
  harnesses: z.array(harnessSchema).default([]),
  agents: z.array(agentSchema).default([]),
  actions: z.array(actionSchema).default([]),
});

export type HarnessConfig = z.infer<typeof harnessSchema>;
export type AgentConfig = z.infer<typeof agentSchema>;
export type ActionConfig = z.infer<typeof actionSchema>;
export type Guardrails = z.infer<typeof guardrailsSchema>;
export type Prices = z.infer<typeof pricesSchema>;
export type RepositoryConfig = z.infer<typeof repositorySchema>;
export type Catalog = z.infer<typeof catalogSchema>;
