/**
 * The run's door as the turn uses it (src/activities/turn/door.ts), against a real gateway on a Unix socket and the
 * SQLite ledger: the harness's environment holds the placeholder wherever the key was, the base URL is the sandbox's
 * side of the door, the budget closes the door mid-turn, between turns nothing is admitted, and the rows land in the
 * ledger with their turn and attempt.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { claudeCode } from '../../src/adapters/claude-code-adapter.js';
import { GatewayRegistry, behindDoor, keyVariablesOf, upstreamOf } from '../../src/activities/turn/door.js';
import { SqliteLedger } from '../../src/ledger/index.js';
import type { FrozenSpec } from '../../src/spec/index.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-door-unit-'));
const ledger = SqliteLedger.open(path.join(dir, 'ledger.sqlite'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function specOf(policy: 'vendor' | 'allowlist', baseUrl?: string): FrozenSpec {
  return {
    agent: { sandbox: { provider: 'local', workspaceScope: 'run', networkPolicy: policy, ...(policy === 'allowlist' ? { allowlist: [{ host: 'registry.npmjs.org', port: 443 }] } : {}) } },
    harness: { name: 'claude', driverClass: 'ClaudeCode', apiKeyEnv: 'MY_KEY', settings: { apiKeyEnv: 'MY_KEY' }, ...(baseUrl ? { baseUrl } : {}), prices: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0 } },
  } as unknown as FrozenSpec;
}

describe('the run’s door', () => {
  it('the key variables get the placeholder (and any variable holding the same value); the base URL is the door', async () => {
    const spec = specOf('vendor', 'http://127.0.0.1:4321/v1');
    expect(keyVariablesOf(spec, claudeCode)).toEqual(['MY_KEY', 'ANTHROPIC_API_KEY']);
    expect(upstreamOf(specOf('vendor'), claudeCode)).toBe('https://api.anthropic.com');
    const registry = new GatewayRegistry();
    const ref = { provider: 'local', workspacePath: dir, hostWorkspacePath: dir, gateway: { socket: path.join(dir, 'a.sock'), port: 18480 } };
    const env = { MY_KEY: 'sk-real-1', COPY_OF_IT: 'sk-real-1', OTHER: 'plain' };
    const door = (await registry.open({ ref, workflowId: 'wf-a', runId: 'r', spec, driver: claudeCode, env, ledger }))!;
    const behind = behindDoor(door, 18480, spec, claudeCode, env);
    expect(behind.env).toEqual({ MY_KEY: door.placeholder, COPY_OF_IT: door.placeholder, OTHER: 'plain', ANTHROPIC_API_KEY: door.placeholder });
    expect(JSON.stringify(behind)).not.toContain('sk-real-1');
    expect(behind.baseUrl).toBe('http://127.0.0.1:18480/v1');
    // The same run and key: the same gateway; another key: a new one (new placeholder).
    expect(await registry.open({ ref, workflowId: 'wf-a', runId: 'r', spec, driver: claudeCode, env, ledger })).toBe(door);
    const rotated = (await registry.open({ ref, workflowId: 'wf-a', runId: 'r', spec, driver: claudeCode, env: { MY_KEY: 'sk-real-2' }, ledger }))!;
    expect(rotated.placeholder).not.toBe(door.placeholder);
    await registry.closeRun('wf-a');
  });

  it('under allowlist the proxy variables name the door, with the placeholder as the proxy credential', async () => {
    const spec = specOf('allowlist', 'http://127.0.0.1:4321');
    const registry = new GatewayRegistry();
    const ref = { provider: 'local', workspacePath: dir, hostWorkspacePath: dir, gateway: { socket: path.join(dir, 'b.sock'), port: 18480 } };
    const door = (await registry.open({ ref, workflowId: 'wf-b', runId: 'r', spec, driver: claudeCode, env: { MY_KEY: 'k' }, ledger }))!;
    const { env } = behindDoor(door, 18480, spec, claudeCode, { MY_KEY: 'k' });
    expect(env.HTTPS_PROXY).toBe(`http://dh:${door.placeholder}@127.0.0.1:18480`);
    expect(env.NO_PROXY).toBe('127.0.0.1,localhost');
    await registry.closeAll();
  });

  it('admits model calls only during a turn, and not once the turn’s metered spend reaches the budget left; rows carry turn and attempt', async () => {
    const spec = specOf('vendor', 'http://127.0.0.1:4321');
    const registry = new GatewayRegistry();
    const ref = { provider: 'local', workspacePath: dir, hostWorkspacePath: dir, gateway: { socket: path.join(dir, 'c.sock'), port: 18480 } };
    await ledger.startRun({ workflowId: 'wf-c', runId: 'r', agent: 'a', harness: 'claude', tenantId: 't', userId: 'u', task: 'x' });
    const door = (await registry.open({ ref, workflowId: 'wf-c', runId: 'r', spec, driver: claudeCode, env: { MY_KEY: 'k' }, ledger }))!;
    expect(door.admit()).toBe('no turn of this run is running');
    door.beginTurn({ turn: 3, attemptId: 'r:a:3:1', budget: { tokens: 100 }, prices: spec.harness.prices }, () => undefined);
    expect(door.admit()).toBeUndefined();
    door.onModelCall({ at: Date.now(), api: 'anthropic-messages', model: 'claude-x', usage: { input: 60, output: 50 }, status: 200, streamed: true, durationMs: 5 });
    expect(door.admit()).toMatch(/the run's token budget is spent \(110 tokens metered this turn, 100 were left\)/);
    door.onRecord({ at: Date.now(), kind: 'connect', method: 'CONNECT', destination: 'evil.example:443', path: '', status: 403, bytesIn: 0, bytesOut: 0, decision: 'refused', rule: 'refused:not-allowlisted', durationMs: 0 });
    const metered = await door.endTurn();
    expect(metered).toEqual({ calls: 1, usage: { input: 60, output: 50 }, models: ['claude-x'], refused: 1, loopbackReads: 0 });
    expect(door.admit()).toBe('no turn of this run is running');
    const calls = await ledger.listModelCalls('wf-c');
    expect(calls.map((c) => [c.turn, c.attemptId, c.call.model])).toEqual([[3, 'r:a:3:1', 'claude-x']]);
    const summary = await ledger.networkSummary('wf-c');
    expect(summary).toMatchObject({ requests: 1, refused: 1, modelCalls: 1, models: ['claude-x'] });
    await registry.closeRun('wf-c');
  });

  it('the loopback reads the run from the ledger: its steps, only the blobs they name, a sub-agent\'s parent steps; reads are rows of the turn', async () => {
    const spec = { ...specOf('vendor', 'http://127.0.0.1:4321'), agent: { ...specOf('vendor').agent, loopback: { resources: [], limits: {} } } } as FrozenSpec;
    const registry = new GatewayRegistry();
    const ref = { provider: 'local', workspacePath: dir, hostWorkspacePath: dir, gateway: { socket: path.join(dir, 'd.sock'), port: 18480 } };
    const base = { agent: 'a', harness: 'claude', tenantId: 't', userId: 'u', task: 'x' };
    await ledger.startRun({ ...base, workflowId: 'wf-parent', runId: 'rp' });
    await ledger.startRun({ ...base, workflowId: 'wf-child', runId: 'rc', parentWorkflowId: 'wf-parent' });
    const named = 'b'.repeat(64);
    const other = 'c'.repeat(64);
    await ledger.putBlob({ hash: named, kind: 'text', content: 'a long reply' });
    await ledger.putBlob({ hash: other, kind: 'text', content: "another run's text" });
    await ledger.recordStep({ workflowId: 'wf-parent', seq: 1, turn: 1, type: 'envelope', payload: { step: 'sub-agent', agent: 'helper' } });
    await ledger.recordStep({ workflowId: 'wf-child', seq: 1, turn: 1, type: 'envelope', payload: { step: 'chat', message: { blob: named, bytes: 12, preview: 'a long' } } });
    const door = (await registry.open({ ref, workflowId: 'wf-child', runId: 'rc', spec, driver: claudeCode, env: { MY_KEY: 'k' }, ledger }))!;
    const behind = behindDoor(door, 18480, spec, claudeCode, { MY_KEY: 'k' });
    expect(behind.mcp).toEqual({ url: 'http://127.0.0.1:18480/.durable-harness/mcp', tokenEnv: 'DURABLE_HARNESS_MCP_TOKEN' });
    expect(behind.env.DURABLE_HARNESS_MCP_TOKEN).toBe(door.loopback!.token);
    const data = door.loopbackData();
    expect((await data.steps(0, 50)).map((s) => s.type)).toEqual(['envelope']);
    expect(await data.blob(named)).toBe('a long reply');
    expect(await data.blob(other)).toBeUndefined(); // content-addressed and shared: a hash alone is no grant
    expect((await data.parentSteps!(0, 50))?.map((s) => s.payload)).toEqual([{ step: 'sub-agent', agent: 'helper' }]);
    door.beginTurn({ turn: 2, attemptId: 'rc:a:2:1', budget: { tokens: 500 }, prices: spec.harness.prices }, () => undefined);
    expect(await data.status()).toMatchObject({ workflowId: 'wf-child', status: 'running', turn: 2, budgetLeft: { tokens: 500 } });
    door.onLoopbackRead({ at: Date.now(), method: 'tools/call', target: 'run_status', status: 'ok', bytes: 10, durationMs: 1 });
    await door.endTurn();
    expect((await ledger.listLoopbackReads('wf-child')).map((r) => [r.turn, r.attemptId, r.read.target])).toEqual([[2, 'rc:a:2:1', 'run_status']]);
    // A root run has no parent to read.
    const root = (await registry.open({ ref: { ...ref, gateway: { socket: path.join(dir, 'e.sock'), port: 18480 } }, workflowId: 'wf-parent', runId: 'rp', spec, driver: claudeCode, env: { MY_KEY: 'k' }, ledger }))!;
    expect(await root.loopbackData().parentSteps!(0, 50)).toBeUndefined();
    expect(root.loopback!.token).not.toBe(door.loopback!.token);
    await registry.closeAll();
  });
});
