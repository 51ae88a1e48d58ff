import type { HostResource, LoopbackLimits } from '../contracts/loopback.js';
/**
 * The frozen spec: everything a run needs, resolved from the catalog once at run start and stored once in the
 * ledger under its content hash. Activities load it by hash; editing or removing the agent in the catalog never
 * changes a run in flight. Secrets are not in it: credentials are grants by name, resolved per attempt.
 */
import type { Capabilities } from '../adapters/types.js';
import type { Prices, RepositoryConfig } from '../catalog/schema.js';
import type { EnvelopeRules } from '../envelope/parse.js';
import type { PermissionPolicy } from '../permissions/policy.js';
import type { SandboxSpec } from '../sandbox/types.js';
import type { AllowRule, NetworkPolicy } from '../contracts/network.js';

/** An allowed action as frozen: the implementation it runs, its settings, cap and parameter JSON Schema. */
export interface FrozenAction {
  readonly name: string;
  /** Key of the implementation in the worker's action registry. */
  readonly implementation: string;
  readonly settings: Readonly<Record<string, unknown>>;
  readonly maxExecutionsPerRun?: number;
  /** JSON Schema of the parameters, as the harness was told. */
  readonly parameters: Readonly<Record<string, unknown>>;
}

/** The run loop's limits: frozen with the agent, and kept by the workflow in its policy. */
export interface RunLimits {
  /**
   * The agent's guardrails (in a policy: narrowed by a parent's remaining budget). `maxSubAgentDepth`: how many levels
   * of sub-agents may still nest below this run (absent in runs resolved before it existed: the default applies).
   */
  readonly guardrails: { readonly maxIterations: number; readonly maxTokens: number; readonly maxCostUsd: number; readonly maxWallTimeMs: number; readonly maxSubAgentDepth?: number };
  readonly subAgents: readonly string[];
  readonly maxMalformedTurns: number;
  readonly chatTimeoutMs: number;
  readonly operatorTimeoutMs: number;
  readonly turnAttempts: number;
}

export interface FrozenSpec {
  readonly specVersion: 1;
  readonly agent: RunLimits & {
    readonly name: string;
    /** The full system prompt: the agent's own text followed by the envelope contract. */
    readonly systemPrompt: string;
    /** Ledger id of that prompt. */
    readonly promptId: string;
    /** The permission policy (posture + rules) the turn's gate applies. */
    readonly permissions: PermissionPolicy;
    /** False only when the policy was accepted as advisory on a harness that cannot ask before a tool runs. */
    readonly permissionsEnforced: boolean;
    /** The sandbox; `allowlist`: the destinations besides the vendor its egress gateway lets through (policy `allowlist`). */
    readonly sandbox: SandboxSpec & { readonly allowlist?: readonly AllowRule[] };
    /** Credential grants by name; values are resolved per attempt, never stored. */
    readonly credentials: readonly { readonly env: string; readonly from?: string }[];
    /** What happens when the worker holding a host-bound workspace is gone (absent in specs frozen before it). */
    readonly hostLoss?: HostLossPolicy;
    /** A non-resuming harness's replay budget per turn, in tokens, when the catalog sets one (else the default). */
    readonly replayMaxTokens?: number;
    /** How often a turn in flight may signal its run with its progress (ms), when the catalog sets it (else 10 s). */
    readonly progressIntervalMs?: number;
    /** The MCP loopback, when the agent has it on (docs/mcp.md). */
    readonly loopback?: { readonly resources: readonly HostResource[]; readonly limits: Partial<LoopbackLimits> };
    /** A run on a git repository: where from, and what it delivers (docs/repositories.md). */
    readonly repository?: RepositoryConfig;
  };
  readonly harness: {
    readonly name: string;
    readonly driverClass: string;
    readonly executable: string;
    readonly args: readonly string[];
    /** Non-secret environment. */
    readonly env: Readonly<Record<string, string>>;
    readonly vendor: string;
    readonly model: string;
    readonly baseUrl?: string;
    readonly apiKeyEnv?: string;
    readonly settings?: Readonly<Record<string, unknown>>;
    readonly prices?: Prices;
    readonly turnTimeoutMs: number;
    /** Replies above this size are refused with a feedback turn. */
    readonly maxReplyBytes: number;
    /** What the adapter implements, with the catalog's overrides. */
    readonly capabilities: Capabilities;
  };
  readonly actions: readonly FrozenAction[];
  /** What the envelope may ask for (action parameters as JSON Schema). */
  readonly envelopeRules: EnvelopeRules;
}

/** How deep sub-agents nest below a run tree's root unless its agent says otherwise (`guardrails.maxSubAgentDepth`). */
export const defaultMaxSubAgentDepth = 3;

/** How long a turn waits for the worker holding its workspace before that host counts as gone (10 minutes). */
export const defaultHostLossTimeoutMs = 10 * 60_000;

/** Host loss (docs/multi-host.md): how long a turn waits for its workspace's worker, and what then. */
export interface HostLossPolicy {
  readonly timeoutMs: number;
  readonly action: 'reprovision' | 'await-operator';
}

/** What the workflow keeps of the spec: its hash and the few fields its decisions need. */
export interface RunPolicy extends RunLimits {
  readonly specHash: string;
  readonly agent: string;
  readonly harness: string;
  readonly sessionResume: boolean;
  /** Whether a price table applies (else a harness without usage makes the cost guardrail blind). */
  readonly priced: boolean;
  readonly actions: readonly { readonly name: string; readonly maxExecutionsPerRun?: number }[];
  readonly turnTimeoutMs: number;
  /** Texts longer than this (characters) travel through history by reference. */
  readonly inlineTextLimit: number;
  /** The sub-agent works in its parent's workspace (`workspaceScope: parent`). */
  readonly sharesParentWorkspace: boolean;
  /**
   * How long one permission request may wait for an operator (ms), when the policy can ask one; the turn
   * activity's timeout covers it. Absent in runs resolved before it existed, and when nothing is ever asked.
   */
  readonly approvalTimeoutMs?: number;
  /** The permission posture as enforced on this harness (absent in runs resolved before it existed). */
  readonly permissions?: {
    readonly posture: string;
    /** Whether tool uses go through the gate (strict, or rules). */
    readonly gated: boolean;
    /** False when the posture was accepted as advisory on a harness that cannot ask: nothing enforces it. */
    readonly enforced: boolean;
    readonly note?: string;
  };
  /** Absent in runs resolved before host affinity: the defaults apply (src/workflows/affinity.ts). */
  readonly hostLoss?: HostLossPolicy;
  /**
   * Whether operator decisions must be signed (the worker's deployment mode when the run started, src/operators);
   * absent in runs resolved before it existed, which take unsigned decisions (`trusted-network`).
   */
  readonly decisions?: 'signed' | 'trusted-network';
  /** The sandbox's network policy (absent in runs resolved before the egress gateway; they ran as their catalog said). */
  readonly network?: NetworkPolicy;
}
