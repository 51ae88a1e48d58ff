import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCatalog } from '../../src/catalog/index.js';
import { repoRoot, startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

describe('the demo agent from the default catalog', () => {
  let w: TestWorker;
  beforeAll(async () => {
    const catalog = loadCatalog(path.join(repoRoot, 'config', 'default.yaml'));
    w = await startTestWorker({ catalog });
  });
  afterAll(() => w?.close());

  it('reads the workspace, asks for an action, resumes its session and succeeds', async () => {
    const workflowId = testWorkflowId('demo');
    const run = await w.start({ agent: 'demo', task: 'Summarise this workspace into NOTES.md', workflowId });
    const result = await run.result();
    expect(result.status).toBe('succeeded');
    expect(result.iterations).toBe(2);
    expect(result.usage.input).toBeGreaterThan(0);
    expect(result.costUsd).toBeGreaterThan(0);
    expect(result.externalSessionId).toBeTruthy();

    const rows = await w.ledger.listPromptRuns(workflowId);
    expect(rows.map((r) => r.turn)).toEqual([1, 2]);
    expect(rows[1]!.resumed).toBe(true);
    expect(rows.every((r) => r.costSource === 'price-table' && r.modelId === 'demo/demo-1')).toBe(true);

    const run2 = await w.ledger.getRun(workflowId);
    expect(run2?.status).toBe('succeeded');
    const status = await run.status();
    expect(status.state).toBe('succeeded');
    expect(status.lastStep?.step).toBe('success');
    const notes = readFileSync(path.join(w.dataDir, 'workspaces', 'runs', workflowId, 'NOTES.md'), 'utf8');
    expect(notes).toContain('Summarise this workspace');
  });
});
