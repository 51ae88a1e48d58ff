/**
 * Instant approvals (issue 22): one worker (this process), one run whose single turn asks N permission requests one
 * after another (posture strict), and an operator that approves each as soon as the run lists it. Per request, on one
 * clock: the harness's wait from its request to the answer, the operator's approve update round trip, and the time
 * from the update's return to the harness's answer — what the turn adds once the decision is written (before the
 * wake-up it was the ledger poll, 500 ms). Target: request → answer ≤ 60 ms p50.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCatalog } from '../src/catalog/index.js';
import { startAgentRun } from '../src/client/index.js';
import { startBenchWorker } from './bench-worker.js';
import { percentile } from './stats.js';

/** A stdio-JSON harness that asks `count` permissions in a row and reports, per request, when it asked and was answered. */
const asker = (count: number) => `import { createInterface } from 'node:readline';
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
await lines.next();
const out = (l) => process.stdout.write(JSON.stringify(l) + '\\n');
out({ type: 'session', id: 'asker-1', resumed: false, model: 'bench' });
const times = [];
for (let i = 0; i < ${count}; i++) {
  const asked = Date.now();
  out({ type: 'permission', id: 'p' + i, tool: 'bash', input: { command: 'echo ' + i } });
  for (;;) {
    const { value, done } = await lines.next();
    if (done) process.exit(3);
    const m = JSON.parse(value);
    if (m.type === 'permission-response' && m.id === 'p' + i) { times.push([asked, Date.now(), m.allow ? 1 : 0]); break; }
  }
}
process.stdout.write(JSON.stringify({ type: 'complete', text: JSON.stringify({ step: 'success', result: JSON.stringify(times) }) }) + '\\n', () => process.exit(0));
`;

export interface ApprovalsFigures {
  readonly requests: number;
  /** Harness: its request to its answer (ms). */
  readonly requestToAnswer: readonly number[];
  /** Operator: the approve update's round trip (ms). */
  readonly updateRoundTrip: readonly number[];
  /** The update's return to the harness's answer (ms; negative when the answer arrived before the update returned). */
  readonly decidedToAnswer: readonly number[];
  /** The harness's request to the operator seeing it in the run's status (ms): the operator's polling, not the product. */
  readonly seenAfter: readonly number[];
}

export async function benchApprovals(opts: { temporalAddress: string; requests?: number; pollMs?: number }): Promise<ApprovalsFigures> {
  const count = opts.requests ?? 30;
  const pollMs = opts.pollMs ?? 5;
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-approvals-'));
  const script = path.join(dataDir, 'asker.mjs');
  writeFileSync(script, asker(count));
  const catalog = parseCatalog(
    {
      harnesses: [{ name: 'asker', driverClass: 'StdioJson', executable: process.execPath, args: [script], active: true, vendor: 'bench', model: 'bench', prices: { input: 1, output: 1 } }],
      agents: [{ name: 'asking', harness: 'asker', permissions: { posture: 'strict', approvalTimeoutMs: 120_000 }, guardrails: { maxIterations: 2, maxWallTimeMs: 600_000 } }],
    },
    'bench catalog',
  );
  const { client, taskQueue, close } = await startBenchWorker({ temporalAddress: opts.temporalAddress, catalog, dataDir, prefix: 'bench-approvals' });
  try {
    const run = await startAgentRun(client, { agent: 'asking', task: 'ask', identity: { tenantId: 'bench', userId: 'bench' }, taskQueue, workflowId: `bench-approvals-${taskQueue}` });
    const seen = new Map<number, { seenAt: number; done: number }>();
    const result = run.result();
    let over = false;
    void result.finally(() => (over = true));
    // The operator: bounded in count and time; approves each request as soon as the run lists it.
    for (let i = 0, deadline = Date.now() + 300_000; i < 200_000 && !over && Date.now() < deadline; i++) {
      const pending = await run.pendingApprovals().catch(() => []);
      for (const p of pending) {
        const index = Number(/echo (\d+)/.exec(p.title)?.[1]);
        if (seen.has(index)) continue;
        const seenAt = Date.now();
        await run.approve(p.requestId, { by: 'bench' });
        seen.set(index, { seenAt, done: Date.now() });
      }
      await new Promise((r) => setTimeout(r, pollMs));
    }
    const outcome = await result;
    if (outcome.status !== 'succeeded') throw new Error(`the approvals run ended ${outcome.status}: ${outcome.reason}`);
    const times = JSON.parse(outcome.result ?? '[]') as [number, number, number][];
    const figures = { requestToAnswer: [] as number[], updateRoundTrip: [] as number[], decidedToAnswer: [] as number[], seenAfter: [] as number[] };
    times.forEach(([asked, answered, allowed], index) => {
      const op = seen.get(index);
      if (!op || allowed !== 1) throw new Error(`request ${index} was not approved by the bench operator`);
      figures.requestToAnswer.push(answered - asked);
      figures.updateRoundTrip.push(op.done - op.seenAt);
      figures.decidedToAnswer.push(answered - op.done);
      figures.seenAfter.push(op.seenAt - asked);
    });
    return { requests: times.length, ...figures };
  } finally {
    await close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export function approvalsLines(f: ApprovalsFigures): string[] {
  const p = (xs: readonly number[]) => `p50 ${percentile(xs, 50)} ms, p99 ${percentile(xs, 99)} ms`;
  return [
    `approvals: ${f.requests} permission requests in one turn, each approved as soon as the run listed it (operator polling every 5 ms)`,
    `- harness request → answer: ${p(f.requestToAnswer)} (target p50 ≤ 60 ms)`,
    `- of which the operator saw it after: ${p(f.seenAfter)}; its approve update round trip: ${p(f.updateRoundTrip)}`,
    `- the update's return → the harness's answer: ${p(f.decidedToAnswer)} (the ledger poll it replaces: 500 ms)`,
  ];
}

export function printApprovals(f: ApprovalsFigures): void {
  console.log(['', ...approvalsLines(f)].join('\n'));
}
