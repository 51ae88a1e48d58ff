import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  accountingIds,
  agentSystemPrompt,
  CatalogError,
  catalogEntries,
  envelopeRulesFor,
  findAgent,
  findHarness,
  loadCatalog,
  networkPolicyOf,
  parseCatalog,
  UnknownAgentError,
  UnknownHarnessError,
} from '../../src/catalog/index.js';
import { parseEnvelope } from '../../src/envelope/index.js';
import { SqliteLedger } from '../../src/ledger/index.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const defaultConfig = path.join(root, 'config/default.yaml');

const minimal = {
  harnesses: [{ name: 'h1', driverClass: 'StdioJson', executable: './bin/h1', args: ['./script.mjs', '--flag', '../up'], vendor: 'acme', model: 'm-1' }],
  agents: [{ name: 'a1', harness: 'h1', systemPrompt: 'Be brief.', actions: ['echo'], subAgents: ['a2'] }, { name: 'a2', harness: 'h1', description: 'helper' }],
  actions: [{ name: 'echo', maxExecutionsPerRun: 2 }],
};

function problemsOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (e) {
    if (e instanceof CatalogError) return [...e.problems];
    throw e;
  }
  throw new Error('expected a CatalogError');
}

describe('parseCatalog', () => {
  it('accepts a valid catalog and applies defaults', () => {
    const catalog = parseCatalog(minimal, 'mem');
    expect(catalog.agents[0]?.guardrails.maxIterations).toBe(20);
    expect(catalog.agents[0]?.actions).toEqual([{ name: 'echo' }]);
    expect(catalog.harnesses[0]?.executable).toBe('./bin/h1'); // no baseDir: left as written
  });

  it('lists every schema problem with its path', () => {
    const bad = {
      harnesses: [{ ...minimal.harnesses[0], turnTimeoutMs: -1 }],
      agents: [minimal.agents[0], { name: 'a2', harness: 'h1', guardrails: { maxCostUsd: 'lots' }, extra: true }],
      actions: minimal.actions,
    };
    const problems = problemsOf(() => parseCatalog(bad, 'mem.yaml'));
    expect(problems).toContain('agents[1].guardrails.maxCostUsd: expected number, received string');
    expect(problems).toContain('agents[1].extra: unknown field');
    expect(problems.some((p) => p.startsWith('harnesses[0].turnTimeoutMs:'))).toBe(true);
    expect(() => parseCatalog(bad, 'mem.yaml')).toThrow(/^invalid catalog mem\.yaml:\n {2}- /);
  });

  it('names a capability flag that was removed and says to delete it, instead of calling it unknown', () => {
    const old = { ...minimal, harnesses: [{ ...minimal.harnesses[0], capabilities: { sessionResume: true, structuredOutput: false, usageReporting: true, modelSelection: true, sessionForks: true } }] };
    const problems = problemsOf(() => parseCatalog(old, 'mem.yaml'));
    for (const key of ['structuredOutput', 'usageReporting', 'modelSelection']) {
      expect(problems).toContainEqual(expect.stringMatching(new RegExp(`^harnesses\\[0\\]\\.capabilities\\.${key}: the capability "${key}" was removed \\(nothing ever read it: .+\\); delete it from the catalog$`)));
    }
    // A misspelt flag is still just unknown.
    expect(problems).toContain('harnesses[0].capabilities.sessionForks: unknown field');
    expect(problems).toHaveLength(4);
  });

  it('network policies: the old "mcp-only" is named as removed, an allowlist must go with policy allowlist, and the default follows the driver', () => {
    const withSandbox = (sandbox: Record<string, unknown>) => ({ ...minimal, agents: [{ ...minimal.agents[0], sandbox }, minimal.agents[1]] });
    expect(problemsOf(() => parseCatalog(withSandbox({ networkPolicy: 'mcp-only' }), 'mem.yaml'))).toEqual([
      expect.stringMatching(/^agents\[0\]\.sandbox\.networkPolicy: "mcp-only" was removed: nothing ever enforced it\. Use "vendor" .*"allowlist" with sandbox\.allowlist$/),
    ]);
    expect(problemsOf(() => parseCatalog(withSandbox({ networkPolicy: 'closed' }), 'mem.yaml'))).toEqual([expect.stringMatching(/networkPolicy: use "none", "vendor", "allowlist" or "open" \(got "closed"\)/)]);
    expect(problemsOf(() => parseCatalog(withSandbox({ networkPolicy: 'vendor', allowlist: [{ host: 'registry.npmjs.org', port: 443 }] }), 'mem.yaml'))).toEqual([
      expect.stringMatching(/^agents\[0\]\.sandbox\.allowlist: only policy "allowlist" reaches it \(networkPolicy is "vendor"\)/),
    ]);
    expect(problemsOf(() => parseCatalog(withSandbox({ networkPolicy: 'allowlist' }), 'mem.yaml'))).toEqual([expect.stringMatching(/policy "allowlist" needs at least one destination.*use networkPolicy: vendor/)]);
    expect(problemsOf(() => parseCatalog(withSandbox({ networkPolicy: 'allowlist', allowlist: [{ host: 'https://registry.npmjs.org/', port: 443, methods: ['get'] }] }), 'mem.yaml'))).toEqual([
      expect.stringMatching(/allowlist\[0\]\.host: a host name or an IP address, without scheme, port or path/),
      expect.stringMatching(/allowlist\[0\]\.methods\[0\]: an HTTP method in capitals/),
    ]);
    const ok = parseCatalog(withSandbox({ networkPolicy: 'allowlist', allowlist: [{ host: 'registry.npmjs.org', port: 443 }, { host: '10.0.0.5', port: 80, methods: ['GET', 'HEAD'] }] }), 'mem');
    expect(ok.agents[0]?.sandbox.allowlist).toHaveLength(2);
    const agent = { sandbox: { provider: 'local', workspaceScope: 'run' as const } };
    expect(['ClaudeCode', 'Codex', 'GeminiCli', 'OpenCode', 'Pi'].map((driverClass) => networkPolicyOf(agent, { driverClass }))).toEqual(Array(5).fill('vendor'));
    expect(networkPolicyOf(agent, { driverClass: 'StdioJson' })).toBe('open');
    expect(networkPolicyOf({ sandbox: { ...agent.sandbox, networkPolicy: 'none' } }, { driverClass: 'ClaudeCode' })).toBe('none');
  });

  it('the MCP loopback: needs a gateway (policy vendor or allowlist), exact resource URIs and absolute paths; frozen bounds', () => {
    const withAgent = (extra: Record<string, unknown>) => ({ ...minimal, agents: [{ ...minimal.agents[0], ...extra }, minimal.agents[1]] });
    // StdioJson defaults to "open": no gateway, no loopback — said, with the fix.
    expect(problemsOf(() => parseCatalog(withAgent({ loopback: {} }), 'mem.yaml'))).toEqual([
      expect.stringMatching(/^agents\[0\]\.loopback: the MCP loopback is served by the run's egress gateway, which network policy "open" does not have; set sandbox\.networkPolicy: vendor/),
    ]);
    expect(problemsOf(() => parseCatalog(withAgent({ loopback: {}, sandbox: { networkPolicy: 'none' } }), 'mem.yaml'))).toEqual([expect.stringMatching(/network policy "none" does not have/)]);
    expect(problemsOf(() => parseCatalog(withAgent({ sandbox: { networkPolicy: 'vendor' }, loopback: { resources: [{ uri: 'no scheme', text: 'x' }, { uri: 'docs://a', file: 'relative.md' }, { uri: 'docs://tree', root: '/srv/docs' }], tools: ['write'] } }), 'mem.yaml')).join('\n')).toMatch(
      /loopback\.resources\[0\][\s\S]*loopback\.resources\[1\][\s\S]*loopback\.resources\[2\][\s\S]*loopback\.tools: unknown field/,
    );
    const ok = parseCatalog(withAgent({ sandbox: { networkPolicy: 'vendor' }, loopback: { resources: [{ uri: 'docs://tree/', root: '/srv/docs' }], maxReadBytes: 4096 } }), 'mem');
    expect(ok.agents[0]?.loopback).toEqual({ enabled: true, resources: [{ uri: 'docs://tree/', root: '/srv/docs' }], maxReadBytes: 4096 });
    expect(agentSystemPrompt(ok, 'a1')).toContain('Your MCP server "durable-harness" reads, and only reads');
    expect(agentSystemPrompt(ok, 'a2')).not.toContain('MCP server');
    expect(parseCatalog(withAgent({ loopback: { enabled: false } }), 'mem').agents[0]?.loopback?.enabled).toBe(false);
    // Another MCP server's resource: an http(s) URL, and its token only by the name of a worker variable.
    const proxied = (mcp: Record<string, unknown>) => withAgent({ sandbox: { networkPolicy: 'vendor' }, loopback: { resources: [{ uri: 'tickets://1', mcp }] } });
    expect(parseCatalog(proxied({ url: 'http://127.0.0.1:7000/mcp', uri: 'up://1', bearerEnv: 'TICKETS_TOKEN' }), 'mem').agents[0]?.loopback?.resources).toHaveLength(1);
    expect(problemsOf(() => parseCatalog(proxied({ url: 'file:///etc/passwd' }), 'mem')).join('\n')).toMatch(/loopback\.resources\[0\]/);
    expect(problemsOf(() => parseCatalog(proxied({ url: 'http://x/mcp', token: 'sk-inline' }), 'mem')).join('\n')).toMatch(/loopback\.resources\[0\]/);
  });

  it('caps actions per envelope at 100 by default, as set, and never above what history can carry', () => {
    expect(parseCatalog(minimal, 'mem').agents[0]?.maxActionsPerEnvelope).toBe(100);
    const set = parseCatalog({ ...minimal, agents: [{ ...minimal.agents[0], maxActionsPerEnvelope: 7 }, minimal.agents[1]] }, 'mem');
    expect(envelopeRulesFor(set, 'a1').maxActions).toBe(7);
    expect(agentSystemPrompt(set, 'a1')).toContain('At most 7 actions per envelope: an envelope asking for more runs none of them.');
    const problems = problemsOf(() => parseCatalog({ ...minimal, agents: [{ ...minimal.agents[0], maxActionsPerEnvelope: 5000 }, minimal.agents[1]] }, 'mem'));
    expect(problems).toEqual([expect.stringMatching(/^agents\[0\]\.maxActionsPerEnvelope: at most 1000: every call of an envelope travels through workflow history/)]);
  });

  it('says when a required field is missing', () => {
    const problems = problemsOf(() => parseCatalog({ agents: [{ name: 'x' }] }, 'mem'));
    expect(problems).toEqual(['agents[0].harness: expected string, but it is missing']);
  });

  it('cross-checks names and references, listing all problems', () => {
    const bad = {
      harnesses: [...minimal.harnesses, minimal.harnesses[0]],
      agents: [
        { name: 'a1', harness: 'nope', actions: ['echo', 'missing_action'], subAgents: ['a1', 'ghost'] },
      ],
      actions: [{ name: 'echo' }, { name: 'custom', implementation: 'not_builtin' }, { name: 'unknown_impl' }],
    };
    expect(problemsOf(() => parseCatalog(bad, 'mem'))).toEqual([
      'harnesses[1].name: duplicate name "h1" (also harnesses[0])',
      'agents[0].harness: harness "nope" is not declared (known: h1)',
      'agents[0].actions[1]: action "missing_action" is not declared under actions (known: echo, custom, unknown_impl)',
      'agents[0].subAgents[0]: an agent cannot be its own sub-agent',
      'agents[0].subAgents[1]: agent "ghost" is not declared (known: a1)',
      'actions[1].implementation: no action implementation "not_builtin" is registered (available: echo, list_files, read_file, write_file)',
      'actions[2].name: no action implementation "unknown_impl" is registered (available: echo, list_files, read_file, write_file)',
    ]);
  });
});

describe('loadCatalog', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'dh-catalog-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reads JSON and resolves relative paths against the file', async () => {
    const file = path.join(dir, 'cat.json');
    await writeFile(file, JSON.stringify(minimal));
    const h = loadCatalog(file).harnesses[0]!;
    expect(h.executable).toBe(path.join(dir, 'bin/h1'));
    expect(h.args).toEqual([path.join(dir, 'script.mjs'), '--flag', '../up']);
  });

  it('names the file and path of a problem in YAML', async () => {
    const file = path.join(dir, 'cat.yml');
    await writeFile(file, 'agents:\n  - name: a\n    harness: missing\n');
    expect(() => loadCatalog(file)).toThrow(`invalid catalog ${file}:\n  - agents[0].harness: harness "missing" is not declared (known: none)`);
  });

  it('reports syntax errors and bad extensions', async () => {
    const yml = path.join(dir, 'bad.yaml');
    await writeFile(yml, 'agents: [\n');
    expect(() => loadCatalog(yml)).toThrow(/not valid YAML/);
    expect(() => loadCatalog(path.join(dir, 'x.toml'))).toThrow(/unsupported extension/);
    expect(() => loadCatalog(path.join(dir, 'absent.json'))).toThrow(/cannot read it \(ENOENT\)/);
  });

  it('loads config/default.yaml', () => {
    const catalog = loadCatalog(defaultConfig);
    const demo = findHarness(catalog, 'demo');
    expect(demo).toMatchObject({ driverClass: 'StdioJson', executable: 'node', active: true, vendor: 'demo', model: 'demo-1' });
    expect(demo.args).toEqual([path.join(root, 'harnesses/demo/demo-harness.mjs')]);
    expect(demo.prices).toEqual({ input: 1.0, output: 4.0, cacheRead: 0.1, cacheWrite: 1.25 });
    const agent = findAgent(catalog, 'demo');
    expect(agent.guardrails).toEqual({ maxIterations: 8, maxTokens: 200000, maxCostUsd: 1, maxWallTimeMs: 600000, maxSubAgentDepth: 3 });
    expect(agent.actions.map((a) => a.name)).toEqual(['write_file', 'read_file', 'list_files']);
    expect(agent.sandbox).toEqual({ provider: 'local', workspaceScope: 'run', networkPolicy: 'none' });
    expect(agent.credentials).toEqual([]);
    const others = catalog.harnesses.filter((h) => h.name !== 'demo');
    expect(others.map((h) => h.driverClass).sort()).toEqual(['ClaudeCode', 'Codex', 'GeminiCli', 'OpenCode', 'Pi']);
    expect(others.every((h) => !h.active)).toBe(true);
  });
});

describe('lookups', () => {
  const catalog = parseCatalog(minimal, 'mem');

  it('unknown agent and harness errors list the known names', () => {
    expect(() => findAgent(catalog, 'zz')).toThrow(UnknownAgentError);
    expect(() => findAgent(catalog, 'zz')).toThrow('unknown agent "zz" (known: a1, a2)');
    expect(() => findHarness(catalog, 'zz')).toThrow(UnknownHarnessError);
    try {
      findHarness(catalog, 'zz');
    } catch (e) {
      expect((e as UnknownHarnessError).code).toBe('UnknownHarness');
      expect((e as Error).message).toBe('unknown harness "zz" (known: h1)');
    }
  });

  it('accounting ids, envelope rules and system prompts', () => {
    expect(accountingIds(catalog, 'a1')).toEqual({ promptId: 'agent:a1', modelId: 'acme/m-1', vendorId: 'acme' });
    const rules = envelopeRulesFor(catalog, 'a1');
    expect(rules.allowedSubAgents).toEqual(['a2']);
    expect(Object.keys(rules.allowedActions)).toEqual(['echo']);
    // Rules are plain JSON, so they survive workflow state.
    const roundTripped = JSON.parse(JSON.stringify(rules)) as typeof rules;
    const result = parseEnvelope('{"step":"actions","actions":[{"name":"echo","params":{"text":1}}]}', roundTripped);
    expect(result.ok && result.actionErrors[0]?.problem).toBe('actions[0].params.text: expected string, got number');
    const prompt = agentSystemPrompt(catalog, 'a1');
    expect(prompt.startsWith('Be brief.\n\n## How to end every turn')).toBe(true);
    expect(prompt).toContain('- echo (at most 2 per run): Return the given text unchanged.');
    expect(prompt).toContain('- a2: helper');
  });

  it('catalogEntries feed Ledger.syncCatalog so prompt runs resolve', async () => {
    const entries = catalogEntries(loadCatalog(defaultConfig));
    expect(entries.vendors.map((v) => v.id)).toEqual(['demo', 'anthropic', 'openai', 'google']);
    expect(entries.models.map((m) => m.id)).toContain('demo/demo-1');
    expect(entries.prompts.map((p) => p.id)).toEqual(['agent:demo']);
    expect(entries.prompts[0]?.text).toContain('End every turn with exactly one JSON object');

    const dir = await mkdtemp(path.join(tmpdir(), 'dh-catalog-ledger-'));
    const ledger = SqliteLedger.open(path.join(dir, 'l.db'));
    try {
      await ledger.syncCatalog(entries);
      const ids = accountingIds(loadCatalog(defaultConfig), 'demo');
      await ledger.startRun({ workflowId: 'wf', runId: 'r', agent: 'demo', harness: 'demo', tenantId: 't', userId: 'u', task: 'x' });
      const res = await ledger.beginAttempt({ workflowId: 'wf', runId: 'r', attemptId: 'a', turn: 1, attempt: 1, ...ids, priced: true, input: '' });
      expect(res.inserted).toBe(true);
    } finally {
      await ledger.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
