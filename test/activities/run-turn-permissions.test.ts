/**
 * runTurn's permission path with a stdio-JSON harness (the scripted harness asks through `permission` lines and
 * really runs what it is allowed to): the agent's policy decides first, an operator answers what it leaves open
 * through the ledger while the activity heartbeats, a timeout denies, and every decision is a ledger row. Also
 * the capability emulations: no system prompt → the contract rides in the input; strict without hooks is
 * refused at agent resolution unless the catalog accepts it as advisory.
 */
import type { FrozenSpec } from '../../src/spec/types.js';
import type { TurnRequest } from '../../src/workflows/types.js';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { createActivities } from '../../src/activities/index.js';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { decidePendingApproval } from '../../src/permissions/index.js';
import { defaultDeps } from '../../src/worker.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { repoRoot } from '../support/worker.js';

const book = scriptBook();
const harness = (name: string, capabilities: Record<string, boolean>) => ({ ...(scriptedCatalog(book).harnesses as Record<string, unknown>[])[0], name, capabilities });
const agent = (name: string, harnessName: string, permissions: unknown) => ({
  name,
  harness: harnessName,
  systemPrompt: 'You follow scripts.',
  actions: ['echo'],
  guardrails: { maxIterations: 10, maxTokens: 1_000_000, maxCostUsd: 100, maxWallTimeMs: 120_000 },
  permissions,
});
const catalog = parseCatalog(
  scriptedCatalog(book, {
    harnesses: [
      harness('no-system-prompt', { systemPrompt: false }),
      harness('no-hooks', { permissionHooks: false }),
      { name: 'pi', driverClass: 'Pi', executable: 'pi', active: true, vendor: 'openai', model: 'm', baseUrl: 'http://127.0.0.1:9/v1' },
    ],
    agents: [
      agent('guarded', 'scripted', { posture: 'strict', allow: ['command:echo *'], deny: ['command:rm *'], approvalTimeoutMs: 60_000 }),
      agent('hasty', 'scripted', { posture: 'strict', approvalTimeoutMs: 1200 }),
      agent('open', 'scripted', 'auto'),
      agent('no-prompt', 'no-system-prompt', 'auto'),
      agent('strict-no-hooks', 'no-hooks', 'strict'),
      agent('advisory', 'no-hooks', { posture: 'strict', advisory: true }),
      { ...agent('pi-looped', 'pi', 'auto'), sandbox: { networkPolicy: 'vendor' }, loopback: {} },
      { ...agent('scripted-looped', 'scripted', 'auto'), sandbox: { networkPolicy: 'vendor' }, loopback: {} },
    ],
  }),
  'test',
  { baseDir: path.join(repoRoot, 'config') },
);

function setup() {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-perm-'));
  const deps = defaultDeps({ catalog: () => catalog, dataDir, env: {}, credentials: new MemoryCredentialStore({}), decisions: 'trusted-network' });
  return { deps: { ...deps, approvalPollMs: 25 }, dataDir };
}

const quiet = (workflowId = 'perm') => new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'r' } }, { logger: new DefaultLogger('ERROR') });

async function turn(agentName: string, workflowId: string, steps: Record<string, unknown>[], operator?: (deps: ReturnType<typeof setup>['deps']) => Promise<void>) {
  const { deps } = setup();
  const activities = createActivities(deps);
  const spec = await activities.resolveAgent({ agent: agentName });
  const { sandbox } = (await quiet(workflowId).run(activities.startSession, { workflowId, runId: 'r', specHash: spec.specHash, identity: { tenantId: 't', userId: 'u' }, task: 'x' })) as Awaited<
    ReturnType<typeof activities.startSession>
  >;
  const env = quiet(workflowId);
  const beats: unknown[] = [];
  env.on('heartbeat', (d: unknown) => beats.push(d));
  const prompt = book.write(`${workflowId}-script`, steps);
  const request: TurnRequest = { turn: 1, envelopeSeq: 1, specHash: spec.specHash, sandbox, input: { kind: 'prompt', parts: [prompt] } };
  const [outcome] = await Promise.all([env.run(activities.runTurn, request), operator?.(deps)]);
  const events = await deps.ledger.readEvents(workflowId, 0, 1000);
  return { outcome, deps, spec, workspace: sandbox.hostWorkspacePath, beats, events, rows: await deps.ledger.listApprovals({ workflowId }) };
}

/** Waits for the run's next pending request and decides it, as `durable-harness approve|deny` does. */
async function answerNext(deps: ReturnType<typeof setup>['deps'], workflowId: string, decision: Parameters<typeof decidePendingApproval>[3]) {
  for (let i = 0; i < 400; i++) {
    const [pending] = await deps.ledger.listApprovals({ workflowId, status: 'pending' });
    if (pending) return decidePendingApproval(deps.ledger, workflowId, pending.requestId, decision);
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error('no pending approval appeared');
}

const has = (workspace: string, file: string) => existsSync(path.join(workspace, file));

describe('runTurn permissions (stdio-JSON harness)', () => {
  it('strict: the policy allows and denies by rule, an operator decides the rest while the turn heartbeats; every decision is in the ledger', async () => {
    const r = await turn(
      'guarded',
      'perm-strict',
      [
        {
          permissions: [
            { tool: 'bash', input: { command: 'echo hi > echoed.txt' } },
            { tool: 'bash', input: { command: 'rm -rf notes' } },
            { tool: 'bash', input: { command: 'touch ran.txt' } },
            { tool: 'write', input: { path: 'out.txt', content: 'hello' } },
          ],
          ...ok('asked'),
        },
      ],
      async (deps) => {
        await answerNext(deps, 'perm-strict', { allow: true, by: 'operator:alice' });
        await answerNext(deps, 'perm-strict', { allow: false, by: 'operator:alice', message: 'no files today' });
        await answerNext(deps, 'perm-strict', { allow: false, by: 'operator:alice', message: 'no files today' });
      },
    );
    expect(r.outcome).toMatchObject({ step: { ok: true, view: { step: 'success', result: 'asked' } } });
    // "echo hi > echoed.txt" has a redirection the allow pattern does not spell out: it went to the operator.
    expect(r.rows.map((row) => [row.command ?? row.paths?.[0], row.status, row.decidedBy])).toEqual([
      ['echo hi > echoed.txt', 'allowed', 'operator:alice'],
      ['rm -rf notes', 'denied', 'policy:deny[0] command:rm *'],
      ['touch ran.txt', 'denied', 'operator:alice'],
      ['out.txt', 'denied', 'operator:alice'],
    ]);
    expect(has(r.workspace, 'echoed.txt')).toBe(true);
    expect(has(r.workspace, 'ran.txt')).toBe(false);
    expect(has(r.workspace, 'out.txt')).toBe(false);
    // While waiting, the heartbeat said so.
    expect(r.beats.some((b) => /waiting for approval t1-[0-9a-f]{10}: echo hi > echoed.txt/.test((b as { lastEvent: string }).lastEvent))).toBe(true);
    expect(r.beats.some((b) => typeof (b as { pendingApproval?: string }).pendingApproval === 'string')).toBe(true);
    const decisions = r.events.filter((e) => e.type === 'permission-decision').map((e) => (e.data as { decision: string; decidedBy: string }).decidedBy);
    expect(decisions).toEqual(['operator:alice', 'policy:deny[0] command:rm *', 'operator:alice', 'operator:alice']);
  }, 60_000);

  it('an allowed rule runs without asking; an edited input runs instead of the asked one', async () => {
    const r = await turn(
      'guarded',
      'perm-edit',
      [{ permissions: [{ tool: 'bash', input: { command: 'echo fine' } }, { tool: 'bash', input: { command: 'touch ran.txt' }, editable: true }], ...ok('edited') }],
      (deps) => answerNext(deps, 'perm-edit', { allow: true, by: 'operator:carol', edit: { command: 'touch edited.txt' } }).then(() => undefined),
    );
    expect(r.rows.map((row) => [row.command, row.status, row.decidedBy])).toEqual([
      ['echo fine', 'allowed', 'policy:allow[0] command:echo *'],
      ['touch ran.txt', 'allowed', 'operator:carol'],
    ]);
    expect(r.rows[1]!.editedInput).toEqual({ command: 'touch edited.txt' });
    expect(has(r.workspace, 'edited.txt')).toBe(true);
    expect(has(r.workspace, 'ran.txt')).toBe(false);
  }, 60_000);

  it('a request nobody answers is denied by its timeout, and the tool never runs', async () => {
    const r = await turn('hasty', 'perm-timeout', [{ permissions: [{ tool: 'bash', input: { command: 'touch ran.txt' } }], ...ok('gave up') }]);
    expect(r.outcome).toMatchObject({ step: { ok: true } });
    expect(r.rows.map((row) => [row.status, row.decidedBy])).toEqual([['denied', 'timeout']]);
    expect(has(r.workspace, 'ran.txt')).toBe(false);
  }, 60_000);

  it('auto without rules answers permission lines at once (a stdio-JSON harness no longer waits for its turn timeout)', async () => {
    const started = Date.now();
    const r = await turn('open', 'perm-auto', [{ permissions: [{ tool: 'bash', input: { command: 'touch ran.txt' } }], ...ok() }]);
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(r.rows.map((row) => [row.status, row.decidedBy])).toEqual([['allowed', 'posture:auto']]);
    expect(has(r.workspace, 'ran.txt')).toBe(true);
    expect(r.events.find((e) => e.type === 'permissions')?.data).toMatchObject({ posture: 'auto', gated: false, enforced: true });
  }, 60_000);

  it('a harness without a system prompt gets the envelope contract in its turn input', async () => {
    const r = await turn('no-prompt', 'perm-no-sp', [ok()]);
    expect(r.outcome).toMatchObject({ step: { ok: true } });
    const request = JSON.parse(readFileSync(path.join(r.workspace, '.scripted', 'last-request.json'), 'utf8')) as { systemPrompt: string | null; prompt: string };
    expect(request.systemPrompt).toBeNull();
    expect(request.prompt).toMatch(/^# Instructions \(your harness takes no system prompt/);
    expect(request.prompt).toContain('You follow scripts.');
    expect(request.prompt).toContain('## How to end every turn (durable-harness envelope contract)');
    expect(request.prompt).toMatch(/# Your input for this turn\n\ndo the scripted thing script:perm-no-sp-script$/);
  }, 60_000);

  it('the MCP loopback on a harness whose driver has no MCP client is refused at resolution; a stdio-JSON harness may take it', async () => {
    const activities = createActivities(setup().deps);
    const refused = await activities.resolveAgent({ agent: 'pi-looped' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toMatchObject({ type: 'McpClientMissing', nonRetryable: true });
    expect((refused as Error).message).toMatch(/harness "pi" \(Pi\) has no MCP client.*delete the agent's loopback/);
    await expect(activities.resolveAgent({ agent: 'scripted-looped' })).resolves.toMatchObject({ specHash: expect.any(String) });
  });

  it('strict on a harness without permission hooks is refused at agent resolution; advisory is accepted and recorded as not enforced', async () => {
    const { deps } = setup();
    const activities = createActivities(deps);
    const refused = await activities.resolveAgent({ agent: 'strict-no-hooks' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(ApplicationFailure);
    expect(refused).toMatchObject({ type: 'PermissionHooksMissing', nonRetryable: true });
    expect((refused as Error).message).toMatch(/harness "no-hooks" \(StdioJson\) cannot ask before a tool runs.*advisory: true/);
    const spec = await activities.resolveAgent({ agent: 'advisory' });
    // The frozen spec keeps the policy and says it is not enforced.
    const frozen = JSON.parse((await deps.ledger.getBlob(spec.specHash))!) as FrozenSpec;
    expect(frozen.agent).toMatchObject({ permissions: { posture: 'strict', advisory: true }, permissionsEnforced: false });
    await quiet().run(activities.startSession, { workflowId: 'perm-advisory', runId: 'r', specHash: spec.specHash, identity: { tenantId: 't', userId: 'u' }, task: 'x' });
    const [event] = await deps.ledger.readEvents('perm-advisory', 0);
    expect(event).toMatchObject({ type: 'permissions', data: { posture: 'strict', enforced: false, note: 'advisory: harness "no-hooks" cannot ask before a tool runs' } });
  }, 60_000);
});
