/** Freezing a run's spec from the catalog, hashing it, and loading it back by hash. */
import type { ActionRegistry } from '../actions/registry.js';
import type { Capabilities } from '../adapters/types.js';
import type { BlobStore } from '../blobs/store.js';
import { sha256 } from '../blobs/store.js';
import { agentSystemPrompt, allowedActionsOf, envelopeRulesFor, findAgent, findHarness, networkPolicyOf } from '../catalog/load.js';
import { actionParametersJsonSchema } from '../catalog/contract-prompt.js';
import type { Catalog } from '../catalog/schema.js';
import { policyIsInteractive } from '../permissions/policy.js';
import type { InheritedBudget } from '../contracts/run.js';
import { defaultHostLossTimeoutMs, defaultMaxSubAgentDepth, type FrozenSpec, type RunPolicy } from './types.js';

const noCapabilities: Capabilities = {
  sessionResume: false,
  permissionHooks: false,
  systemPrompt: false,
};

/** Everything `agentName` needs from the catalog, resolved now. Throws UnknownAgentError / UnknownHarnessError. */
export function freezeSpec(catalog: Catalog, agentName: string, registry: ActionRegistry, adapterCapabilities: Partial<Capabilities>): FrozenSpec {
  const agent = findAgent(catalog, agentName);
  const harness = findHarness(catalog, agent.harness);
  const capabilities: Capabilities = { ...noCapabilities, ...adapterCapabilities, ...(harness.capabilities ?? {}) };
  const permissionsEnforced = !policyIsInteractive(agent.permissions) || capabilities.permissionHooks;
  const actions = allowedActionsOf(catalog, agent, registry).map((a) => {
    const config = catalog.actions.find((c) => c.name === a.name)!;
    return {
      name: a.name,
      implementation: config.implementation ?? config.name,
      settings: config.settings ?? {},
      ...(a.maxExecutionsPerRun !== undefined ? { maxExecutionsPerRun: a.maxExecutionsPerRun } : {}),
      parameters: actionParametersJsonSchema(a.parameters),
    };
  });
  return {
    specVersion: 1,
    agent: {
      name: agent.name,
      systemPrompt: agentSystemPrompt(catalog, agent.name, registry),
      promptId: `agent:${agent.name}`,
      permissions: agent.permissions,
      permissionsEnforced,
      sandbox: { provider: agent.sandbox.provider, workspaceScope: agent.sandbox.workspaceScope, networkPolicy: networkPolicyOf(agent, harness), ...(agent.sandbox.allowlist ? { allowlist: agent.sandbox.allowlist.map((r) => ({ ...r })) } : {}), ...(agent.sandbox.options ? { options: agent.sandbox.options } : {}), ...(agent.sandbox.concurrentRuns ? { concurrentRuns: agent.sandbox.concurrentRuns } : {}) },
      guardrails: { ...agent.guardrails },
      credentials: agent.credentials.map((g) => ({ env: g.env, ...(g.from ? { from: g.from } : {}) })),
      subAgents: [...agent.subAgents],
      maxMalformedTurns: agent.maxMalformedTurns,
      chatTimeoutMs: agent.chatTimeoutMs,
      operatorTimeoutMs: agent.operatorTimeoutMs,
      turnAttempts: agent.turnAttempts,
      ...(agent.progressIntervalMs !== undefined ? { progressIntervalMs: agent.progressIntervalMs } : {}),
      hostLoss: { timeoutMs: agent.sandbox.hostLossTimeoutMs ?? defaultHostLossTimeoutMs, action: agent.sandbox.onHostLoss ?? 'await-operator' },
      ...(agent.replayMaxTokens !== undefined ? { replayMaxTokens: agent.replayMaxTokens } : {}),
      ...(agent.loopback?.enabled ? { loopback: frozenLoopback(agent.loopback) } : {}),
      ...(agent.repository ? { repository: structuredClone(agent.repository) } : {}),
    },
    harness: {
      name: harness.name,
      driverClass: harness.driverClass,
      executable: harness.executable,
      args: [...harness.args],
      env: { ...harness.env },
      vendor: harness.vendor,
      model: harness.model,
      ...(harness.baseUrl ? { baseUrl: harness.baseUrl } : {}),
      ...(harness.apiKeyEnv ? { apiKeyEnv: harness.apiKeyEnv } : {}),
      ...(harness.settings ? { settings: harness.settings } : {}),
      ...(harness.prices ? { prices: harness.prices } : {}),
      turnTimeoutMs: harness.turnTimeoutMs,
      maxReplyBytes: harness.maxReplyBytes,
      capabilities,
    },
    actions,
    envelopeRules: envelopeRulesFor(catalog, agent.name, registry),
  };
}

function frozenLoopback(loopback: NonNullable<Catalog['agents'][number]['loopback']>): NonNullable<FrozenSpec['agent']['loopback']> {
  const { enabled: _enabled, resources, ...limits } = loopback;
  return { resources: resources.map((r) => ({ ...r })), limits: { ...limits } };
}

/** JSON with object keys sorted at every level: the same spec always hashes the same. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
    return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  });
}

export function specHashOf(spec: FrozenSpec): string {
  return sha256(canonicalJson(spec));
}

/** The fields the workflow's decisions need; a parent's remaining budget narrows the guardrails. */
export function policyOf(spec: FrozenSpec, specHash: string, options: { budget?: InheritedBudget; inlineTextLimit: number; decisions?: 'signed' | 'trusted-network' }): RunPolicy {
  const g = spec.agent.guardrails;
  const b = options.budget;
  return {
    specHash,
    agent: spec.agent.name,
    harness: spec.harness.name,
    sessionResume: spec.harness.capabilities.sessionResume,
    priced: spec.harness.prices !== undefined,
    guardrails: {
      maxIterations: Math.min(g.maxIterations, b?.maxIterations ?? Infinity),
      maxTokens: Math.min(g.maxTokens, b?.maxTokens ?? Infinity),
      maxCostUsd: Math.min(g.maxCostUsd, b?.maxCostUsd ?? Infinity),
      maxWallTimeMs: g.maxWallTimeMs,
      maxSubAgentDepth: Math.min(g.maxSubAgentDepth ?? defaultMaxSubAgentDepth, b?.maxSubAgentDepth ?? Infinity),
    },
    actions: spec.actions.map((a) => ({ name: a.name, ...(a.maxExecutionsPerRun !== undefined ? { maxExecutionsPerRun: a.maxExecutionsPerRun } : {}) })),
    subAgents: spec.agent.subAgents,
    maxMalformedTurns: spec.agent.maxMalformedTurns,
    chatTimeoutMs: spec.agent.chatTimeoutMs,
    operatorTimeoutMs: spec.agent.operatorTimeoutMs,
    turnAttempts: spec.agent.turnAttempts,
    turnTimeoutMs: spec.harness.turnTimeoutMs,
    inlineTextLimit: options.inlineTextLimit,
    sharesParentWorkspace: spec.agent.sandbox.workspaceScope === 'parent',
    ...permissionsOf(spec),
    ...(spec.agent.hostLoss ? { hostLoss: spec.agent.hostLoss } : {}),
    ...(options.decisions ? { decisions: options.decisions } : {}),
    network: spec.agent.sandbox.networkPolicy,
  };
}

/** Frozen specs by hash: stored once in the blob store, cached in memory (a spec never changes under its hash). */
export class SpecStore {
  private readonly cache = new Map<string, Promise<FrozenSpec>>();

  constructor(private readonly blobs: BlobStore) {}

  /** Stores the spec (idempotent) and returns its hash. */
  async save(spec: FrozenSpec): Promise<string> {
    const text = canonicalJson(spec);
    const hash = await this.blobs.put(text, 'spec');
    this.cache.set(hash, Promise.resolve(spec));
    return hash;
  }

  load(hash: string): Promise<FrozenSpec> {
    let spec = this.cache.get(hash);
    if (!spec) {
      spec = this.blobs.get(hash).then((text) => JSON.parse(text) as FrozenSpec);
      spec.catch(() => this.cache.delete(hash)); // a failed load is tried again next time
      this.cache.set(hash, spec);
    }
    return spec;
  }
}

/** The permission fields of a run's policy: the approval wait the turn timeout must cover, and whether it is enforced. */
function permissionsOf(spec: FrozenSpec): Pick<RunPolicy, 'approvalTimeoutMs' | 'permissions'> {
  const p = spec.agent.permissions;
  const gated = policyIsInteractive(p);
  return {
    ...(gated && spec.agent.permissionsEnforced ? { approvalTimeoutMs: p.approvalTimeoutMs } : {}),
    permissions: {
      posture: p.posture,
      gated,
      enforced: spec.agent.permissionsEnforced,
      ...(!spec.agent.permissionsEnforced ? { note: `advisory: harness "${spec.harness.name}" cannot ask before a tool runs` } : {}),
    },
  };
}
