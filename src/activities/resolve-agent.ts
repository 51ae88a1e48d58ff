/** `resolveAgent`: the agent from the catalog, checked against this worker and frozen into the ledger. */
import { ApplicationFailure } from '@temporalio/activity';
import { findDriver, UnknownDriverError } from '../adapters/registry.js';
import { findAgent, findHarness, networkPolicyOf } from '../catalog/index.js';
import { resolveCredentials } from '../credentials/index.js';
import { freezeSpec, policyOf, type FrozenSpec, type RunPolicy } from '../spec/index.js';
import type { InheritedBudget } from '../workflows/types.js';
import type { Deps } from './deps.js';
import { FailureTypes } from '../contracts/failures.js';
import { permanent } from './failures.js';
import { upstreamOf } from './turn/door.js';
import { usesGateway } from '../contracts/network.js';
import { waitForLedger } from './ledger-wait.js';

export interface ResolveAgentInput {
  readonly agent: string;
  readonly budget?: InheritedBudget;
}

/** Resolves the agent from the catalog, freezes its spec into the ledger, and returns what the workflow keeps. */
export async function resolveAgent(deps: Deps, input: ResolveAgentInput): Promise<RunPolicy> {
  const spec = freeze(deps, input.agent);
  const hash = await waitForLedger(() => deps.specs.save(spec));
  // The accounting ids of this spec resolve in the ledger for as long as the run lives, whatever the catalog does.
  await waitForLedger(() =>
    deps.ledger.syncCatalog({
      vendors: [{ id: spec.harness.vendor, name: spec.harness.vendor }],
      models: [{ id: `${spec.harness.vendor}/${spec.harness.model}`, vendorId: spec.harness.vendor, name: spec.harness.model }],
      prompts: [{ id: spec.agent.promptId, name: spec.agent.name, text: spec.agent.systemPrompt }],
    }),
  );
  return policyOf(spec, hash, { budget: input.budget, inlineTextLimit: deps.inlineTextLimit, decisions: deps.decisionMode ?? 'signed' });
}

/** Checks what the catalog asks for against this worker, then freezes it. */
function freeze(deps: Deps, agentName: string): FrozenSpec {
  const catalog = deps.catalog();
  const agent = permanent(() => findAgent(catalog, agentName), FailureTypes.UnknownAgent);
  const harness = permanent(() => findHarness(catalog, agent.harness), FailureTypes.UnknownHarness);
  if (!harness.active) {
    throw ApplicationFailure.nonRetryable(
      `Harness "${harness.name}" is inactive. Install its binary (${harness.executable}), then set "active: true" for it in the catalog.`,
      FailureTypes.InactiveHarness,
    );
  }
  if (!deps.adapters.has(harness.driverClass)) {
    throw ApplicationFailure.nonRetryable(new UnknownDriverError(harness.driverClass, [...deps.adapters.keys()].sort()).message, FailureTypes.UnknownDriver);
  }
  const sandboxProvider = deps.provider(agent.sandbox.provider);
  const networkPolicy = networkPolicyOf(agent, harness);
  if (agent.sandbox.workspaceScope !== 'parent' && sandboxProvider.enforces(networkPolicy) === 'refused') {
    throw ApplicationFailure.nonRetryable(`Agent "${agent.name}": ${sandboxProvider.refusalOf(networkPolicy)}`, FailureTypes.SandboxPolicyRefused);
  }
  const driver = findDriver(deps.adapters, harness.driverClass);
  if (usesGateway(networkPolicy) && harness.apiKeyEnv !== undefined && upstreamOf({ harness }, driver) === undefined) {
    throw ApplicationFailure.nonRetryable(
      `Agent "${agent.name}": network policy "${networkPolicy}" sends harness "${harness.name}"'s model calls through the egress gateway, which must know ` +
        `where its vendor is, and ${harness.driverClass} speaks whichever API its provider does: set baseUrl on harness "${harness.name}" in the catalog.`,
      FailureTypes.SandboxPolicyRefused,
    );
  }
  // The contract would tell the model about tools its CLI cannot reach. A stdio-JSON harness gets the loopback's
  // URL and token and may speak MCP itself: its author opted in by turning the loopback on.
  if (agent.loopback?.enabled && !driver.capabilities.mcpClient && harness.driverClass !== 'StdioJson') {
    throw ApplicationFailure.nonRetryable(
      `Agent "${agent.name}" has the MCP loopback on, but harness "${harness.name}" (${harness.driverClass}) has no MCP client its driver can configure ` +
        '(capabilities.mcpClient is false). Use Claude Code, Codex, Gemini CLI or OpenCode, or delete the agent\'s loopback.',
      FailureTypes.McpClientMissing,
    );
  }
  // Fail at resolution, not three attempts later: a harness whose key cannot be resolved never works.
  permanent(() => resolveCredentials({ agent, harness, store: deps.credentials, env: deps.env }), FailureTypes.CredentialMissing);
  const spec = permanent(() => freezeSpec(catalog, agentName, deps.actions, findDriver(deps.adapters, harness.driverClass).capabilities), FailureTypes.UnknownAgent);
  const policy = spec.agent.permissions;
  if (!spec.agent.permissionsEnforced && !policy.advisory) {
    const what = policy.posture === 'strict' ? 'permission posture "strict"' : 'permission rules';
    throw ApplicationFailure.nonRetryable(
      `Agent "${agent.name}" has ${what}, but harness "${harness.name}" (${harness.driverClass}) cannot ask before a tool runs ` +
        '(no permission hooks), so it could not be enforced. Use a harness with permission hooks, use "auto" without rules, ' +
        'or set permissions.advisory: true for this agent to run it with the posture reported as not enforced.',
      FailureTypes.PermissionHooksMissing,
    );
  }
  return spec;
}
