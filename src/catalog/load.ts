/** Loading the catalog: parse JSON or YAML, validate with zod, cross-check references, resolve relative paths. */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import type { z } from 'zod';
import type { CatalogEntries } from '../ledger/types.js';
import { createBuiltinRegistry } from '../actions/builtin.js';
import type { ActionRegistry } from '../actions/registry.js';
import type { EnvelopeRules } from '../envelope/parse.js';
import { actionParametersJsonSchema, buildContractPrompt, joinSystemPrompt, type ContractAction } from './contract-prompt.js';
import type { NetworkPolicy } from '../contracts/network.js';
import { githubRepositoryOf, repositorySourceProblem } from '../contracts/repository.js';
import { catalogSchema, removedCapabilities, type AgentConfig, type Catalog, type HarnessConfig } from './schema.js';

/** Raised when the task queue is already served by a worker with another catalog. */
export class CatalogMismatchError extends Error {
  override readonly name = 'CatalogMismatchError';
  readonly code = 'CatalogMismatch' as const;
}

/** A catalog that failed to load; `problems` lists every problem as `path: what is wrong`. */
export class CatalogError extends Error {
  override readonly name = 'CatalogError';
  readonly code = 'CatalogInvalid' as const;

  constructor(
    readonly source: string,
    readonly problems: readonly string[],
  ) {
    super(`invalid catalog ${source}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  }
}

/** An agent name that is not in the catalog. */
export class UnknownAgentError extends Error {
  override readonly name = 'UnknownAgentError';
  readonly code = 'UnknownAgent' as const;
}

/** The drivers of real CLIs: their agents default to network policy `vendor` (the model API only, through the gateway). */
const cliDrivers = new Set(['ClaudeCode', 'Codex', 'GeminiCli', 'OpenCode', 'Pi']);

/**
 * The agent's network policy: the catalog's, or the default: `vendor` for a real CLI, `open` for a stdio-JSON harness
 * (the author's own program, whose network needs the runtime cannot know: its catalog should say).
 */
export function networkPolicyOf(agent: Pick<AgentConfig, 'sandbox'>, harness: Pick<HarnessConfig, 'driverClass'>): NetworkPolicy {
  return agent.sandbox.networkPolicy ?? (cliDrivers.has(harness.driverClass) ? 'vendor' : 'open');
}

/** A harness name that is not in the catalog. */
export class UnknownHarnessError extends Error {
  override readonly name = 'UnknownHarnessError';
  readonly code = 'UnknownHarness' as const;
}

export interface ParseCatalogOptions {
  /** Directory relative executables and `./` args resolve against; without it they are left as written. */
  readonly baseDir?: string;
  /** Where built-in action implementations are looked up (default: the built-ins). */
  readonly registry?: ActionRegistry;
}

function formatPath(segments: readonly PropertyKey[]): string {
  let out = '';
  for (const s of segments) {
    if (typeof s === 'number') out += `[${s}]`;
    else out += out ? `.${String(s)}` : String(s);
  }
  return out || '(root)';
}

/** What to say about a capability flag that was removed, when `key` under `at` is one. */
function removedCapability(at: readonly PropertyKey[], key: string): string | undefined {
  const reason = at.at(-1) === 'capabilities' && Object.hasOwn(removedCapabilities, key) ? removedCapabilities[key] : undefined;
  return reason === undefined ? undefined : `the capability "${key}" was removed (nothing ever read it: ${reason}); delete it from the catalog`;
}

function describeIssue(issue: z.core.$ZodIssue): string[] {
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((k) => `${formatPath([...issue.path, k])}: ${removedCapability(issue.path, k) ?? 'unknown field'}`);
  }
  const message = issue.message.replace(/^Invalid input: /, '').replace(/received undefined$/, 'but it is missing');
  return [`${formatPath(issue.path)}: ${message}`];
}

function known(names: readonly string[]): string {
  return names.length ? [...new Set(names)].join(', ') : 'none';
}

function duplicates(kind: string, items: readonly { name: string }[]): string[] {
  const first = new Map<string, number>();
  const problems: string[] = [];
  items.forEach((item, i) => {
    const seen = first.get(item.name);
    if (seen === undefined) first.set(item.name, i);
    else problems.push(`${kind}[${i}].name: duplicate name "${item.name}" (also ${kind}[${seen}])`);
  });
  return problems;
}

function crossCheck(catalog: Catalog, registry: ActionRegistry): string[] {
  const problems = [
    ...duplicates('harnesses', catalog.harnesses),
    ...duplicates('agents', catalog.agents),
    ...duplicates('actions', catalog.actions),
  ];
  const harnessNames = catalog.harnesses.map((h) => h.name);
  const agentNames = catalog.agents.map((a) => a.name);
  const actionNames = catalog.actions.map((a) => a.name);

  catalog.agents.forEach((agent, i) => {
    if (!harnessNames.includes(agent.harness)) {
      problems.push(`agents[${i}].harness: harness "${agent.harness}" is not declared (known: ${known(harnessNames)})`);
    }
    agent.actions.forEach((action, j) => {
      if (!actionNames.includes(action.name)) {
        problems.push(
          `agents[${i}].actions[${j}]: action "${action.name}" is not declared under actions (known: ${known(actionNames)})`,
        );
      }
    });
    const { networkPolicy, allowlist } = agent.sandbox;
    if (allowlist !== undefined && networkPolicy !== 'allowlist') {
      problems.push(`agents[${i}].sandbox.allowlist: only policy "allowlist" reaches it (networkPolicy is ${JSON.stringify(networkPolicy ?? 'the default')}); set networkPolicy: allowlist or delete the allowlist`);
    }
    if (networkPolicy === 'allowlist' && !allowlist?.length) {
      problems.push(`agents[${i}].sandbox.allowlist: policy "allowlist" needs at least one destination ({ host, port, methods? }); with none, use networkPolicy: vendor`);
    }
    if (agent.loopback?.enabled) {
      const harness = catalog.harnesses.find((h) => h.name === agent.harness);
      const policy = harness ? networkPolicyOf(agent, harness) : networkPolicy;
      if (policy !== undefined && policy !== 'vendor' && policy !== 'allowlist') {
        problems.push(`agents[${i}].loopback: the MCP loopback is served by the run's egress gateway, which network policy ${JSON.stringify(policy)} does not have; set sandbox.networkPolicy: vendor (or allowlist), or delete the loopback`);
      }
    }
    if (agent.repository) {
      const r = agent.repository;
      if (agent.sandbox.workspaceScope !== 'run') {
        problems.push(`agents[${i}].repository: a run on a repository needs a workspace of its own (sandbox.workspaceScope: run); scope ${JSON.stringify(agent.sandbox.workspaceScope)} shares one between runs`);
      }
      [r.source, ...r.sources].forEach((source, j) => {
        const problem = source === undefined ? undefined : repositorySourceProblem(source.endsWith('/') && j > 0 ? `${source}x` : source);
        if (problem) problems.push(`agents[${i}].repository.${j === 0 ? 'source' : `sources[${j - 1}]`}: ${problem}`);
      });
      if (r.deliver === 'pull-request' && !r.pullRequest?.repository && r.source !== undefined && githubRepositoryOf(r.source) === undefined) {
        problems.push(`agents[${i}].repository.pullRequest.repository: the pull request's owner/name cannot be read from source ${JSON.stringify(r.source)}; set it`);
      }
      if (r.deliver === 'pull-request' && !(r.pullRequest?.credential ?? r.credential)) {
        problems.push(`agents[${i}].repository: deliver "pull-request" needs a credential for the API: set repository.credential (or pullRequest.credential) to a name in the worker's credential store`);
      }
    }
    agent.subAgents.forEach((sub, j) => {
      if (sub === agent.name) problems.push(`agents[${i}].subAgents[${j}]: an agent cannot be its own sub-agent`);
      else if (!agentNames.includes(sub)) {
        problems.push(`agents[${i}].subAgents[${j}]: agent "${sub}" is not declared (known: ${known(agentNames)})`);
      }
    });
  });
  catalog.actions.forEach((action, i) => {
    const impl = action.implementation ?? action.name;
    if (!registry.has(impl)) {
      const where = action.implementation !== undefined ? `actions[${i}].implementation` : `actions[${i}].name`;
      problems.push(`${where}: no action implementation "${impl}" is registered (available: ${known(registry.names())})`);
    }
  });
  return problems;
}

function resolveHarnessPaths(harness: HarnessConfig, baseDir: string): HarnessConfig {
  const relative = (p: string) => p.startsWith('./') || p.startsWith('../');
  return {
    ...harness,
    executable: relative(harness.executable) ? path.resolve(baseDir, harness.executable) : harness.executable,
    args: harness.args.map((a) => (a.startsWith('./') ? path.resolve(baseDir, a) : a)),
  };
}

/** Validates an in-memory catalog; throws CatalogError listing every problem. */
export function parseCatalog(input: unknown, sourceName: string, options: ParseCatalogOptions = {}): Catalog {
  const parsed = catalogSchema.safeParse(input ?? {});
  if (!parsed.success) throw new CatalogError(sourceName, parsed.error.issues.flatMap(describeIssue));
  const problems = crossCheck(parsed.data, options.registry ?? createBuiltinRegistry());
  if (problems.length > 0) throw new CatalogError(sourceName, problems);
  const { baseDir } = options;
  if (baseDir === undefined) return parsed.data;
  return { ...parsed.data, harnesses: parsed.data.harnesses.map((h) => resolveHarnessPaths(h, baseDir)) };
}

/** Reads a catalog file (`.json`, `.yaml` or `.yml`), validates it and resolves relative paths against its directory. */
export function loadCatalog(file: string, options: Omit<ParseCatalogOptions, 'baseDir'> = {}): Catalog {
  const ext = path.extname(file).toLowerCase();
  if (!['.json', '.yaml', '.yml'].includes(ext)) {
    throw new CatalogError(file, [`(file): unsupported extension "${ext}"; use .json, .yaml or .yml`]);
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new CatalogError(file, [`(file): cannot read it (${(e as NodeJS.ErrnoException).code ?? String(e)})`]);
  }
  let data: unknown;
  try {
    data = ext === '.json' ? JSON.parse(text) : YAML.parse(text);
  } catch (e) {
    throw new CatalogError(file, [`(file): not valid ${ext === '.json' ? 'JSON' : 'YAML'}: ${(e as Error).message}`]);
  }
  return parseCatalog(data, file, { ...options, baseDir: path.dirname(path.resolve(file)) });
}

/** The agent with this name; throws UnknownAgentError listing the known names. */
export function findAgent(catalog: Catalog, name: string): AgentConfig {
  const agent = catalog.agents.find((a) => a.name === name);
  if (!agent) {
    throw new UnknownAgentError(`unknown agent "${name}" (known: ${known(catalog.agents.map((a) => a.name))})`);
  }
  return agent;
}

/** The harness with this name; throws UnknownHarnessError listing the known names. */
export function findHarness(catalog: Catalog, name: string): HarnessConfig {
  const harness = catalog.harnesses.find((h) => h.name === name);
  if (!harness) {
    throw new UnknownHarnessError(`unknown harness "${name}" (known: ${known(catalog.harnesses.map((h) => h.name))})`);
  }
  return harness;
}

/** The ledger ids a prompt run of this agent must carry. */
export function accountingIds(catalog: Catalog, agentName: string): { promptId: string; modelId: string; vendorId: string } {
  const agent = findAgent(catalog, agentName);
  const harness = findHarness(catalog, agent.harness);
  return { promptId: `agent:${agent.name}`, modelId: `${harness.vendor}/${harness.model}`, vendorId: harness.vendor };
}

/** The agent's allowed actions, with catalog names and descriptions, implementation parameters and caps. */
export function allowedActionsOf(
  catalog: Catalog,
  agent: AgentConfig,
  registry: ActionRegistry = createBuiltinRegistry(),
): ContractAction[] {
  return agent.actions.flatMap((ref) => {
    const config = catalog.actions.find((a) => a.name === ref.name);
    const impl = config && registry.get(config.implementation ?? config.name);
    if (!config || !impl) return [];
    // The agent's own cap wins over the action's default cap.
    const cap = ('maxExecutionsPerRun' in ref ? ref.maxExecutionsPerRun : undefined) ?? config.maxExecutionsPerRun;
    return [
      {
        name: config.name,
        description: config.description ?? impl.description,
        parameters: impl.parameters,
        ...(cap !== undefined ? { maxExecutionsPerRun: cap } : {}),
      },
    ];
  });
}

/** The agent with this name and the actions it may ask for (the two halves of its envelope contract). */
function agentAndActions(catalog: Catalog, agentName: string, registry: ActionRegistry): { agent: AgentConfig; actions: ContractAction[] } {
  const agent = findAgent(catalog, agentName);
  return { agent, actions: allowedActionsOf(catalog, agent, registry) };
}

/** The agent's full system prompt: its own prompt followed by the envelope contract. */
export function agentSystemPrompt(catalog: Catalog, agentName: string, registry: ActionRegistry = createBuiltinRegistry()): string {
  const { agent, actions } = agentAndActions(catalog, agentName, registry);
  const subAgents = agent.subAgents.map((name) => ({ name, description: findAgent(catalog, name).description }));
  const contract = buildContractPrompt({ agent, actions, subAgents, maxActionsPerEnvelope: agent.maxActionsPerEnvelope, ...(agent.loopback?.enabled ? { loopback: true } : {}) });
  return joinSystemPrompt(agent.systemPrompt, contract);
}

/** Envelope rules for the agent, with JSON Schema parameters so they can travel in workflow state. */
export function envelopeRulesFor(catalog: Catalog, agentName: string, registry: ActionRegistry = createBuiltinRegistry()): EnvelopeRules {
  const { agent, actions } = agentAndActions(catalog, agentName, registry);
  const allowedActions: Record<string, { parameters: Record<string, unknown> }> = {};
  for (const action of actions) {
    allowedActions[action.name] = { parameters: actionParametersJsonSchema(action.parameters) };
  }
  return { allowedActions, allowedSubAgents: [...agent.subAgents], maxActions: agent.maxActionsPerEnvelope };
}

/** Vendors, models and prompts for Ledger.syncCatalog. */
export function catalogEntries(catalog: Catalog, registry: ActionRegistry = createBuiltinRegistry()): CatalogEntries {
  const vendors = new Map<string, { id: string; name: string }>();
  const models = new Map<string, { id: string; vendorId: string; name: string }>();
  for (const h of catalog.harnesses) {
    vendors.set(h.vendor, { id: h.vendor, name: h.vendor });
    const id = `${h.vendor}/${h.model}`;
    models.set(id, { id, vendorId: h.vendor, name: h.model });
  }
  const prompts = catalog.agents.map((a) => ({
    id: `agent:${a.name}`,
    name: a.name,
    text: agentSystemPrompt(catalog, a.name, registry),
  }));
  return { vendors: [...vendors.values()], models: [...models.values()], prompts };
}
