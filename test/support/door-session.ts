/**
 * One run of a stdio-JSON harness script behind its run's egress gateway, through the real activities and no
 * Temporal server: the catalog (the vendor key granted from VENDOR_KEY into DURABLE_HARNESS_API_KEY), the session
 * with its door, one turn, and the session's end. What the gateway's activity tests share.
 */
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import { createActivities } from '../../src/activities/index.js';
import { parseCatalog } from '../../src/catalog/index.js';
import { MemoryCredentialStore } from '../../src/credentials/index.js';
import { defaultDeps } from '../../src/worker.js';
import type { TurnRequest, TurnResult } from '../../src/workflows/types.js';

export interface DoorSessionOptions {
  /** Its data directory goes under here. */
  readonly dir: string;
  readonly workflowId: string;
  /** The harness: `node <script>`. */
  readonly script: string;
  /** The real vendor the gateway forwards to. */
  readonly vendorUrl: string;
  /** The real key behind the placeholder. */
  readonly secret: string;
  /** The agent's sandbox (its network policy, an allowlist). */
  readonly sandbox: Record<string, unknown>;
  readonly guardrails?: Record<string, unknown>;
}

export async function openDoorSession(o: DoorSessionOptions) {
  const catalog = parseCatalog(
    {
      harnesses: [{ name: 'h', driverClass: 'StdioJson', executable: process.execPath, args: [o.script], active: true, vendor: 'acme', model: 'claude-x', apiKeyEnv: 'DURABLE_HARNESS_API_KEY', baseUrl: o.vendorUrl, prices: { input: 1, output: 1 } }],
      agents: [{ name: 'a', harness: 'h', sandbox: o.sandbox, credentials: [{ env: 'DURABLE_HARNESS_API_KEY', from: 'VENDOR_KEY' }], ...(o.guardrails ? { guardrails: o.guardrails } : {}) }],
    },
    'test',
  );
  const deps = defaultDeps({ catalog: () => catalog, dataDir: path.join(o.dir, 'data'), env: { VENDOR_KEY: o.secret }, credentials: new MemoryCredentialStore({}), decisions: 'trusted-network' });
  const activities = createActivities(deps);
  const policy = await activities.resolveAgent({ agent: 'a' });
  const { workflowId } = o;
  const env = new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'r' } }, { logger: new DefaultLogger('ERROR') });
  const { sandbox } = (await env.run(activities.startSession, { workflowId, runId: 'r', specHash: policy.specHash, identity: { tenantId: 't', userId: 'u' }, task: 'x' })) as Awaited<ReturnType<typeof activities.startSession>>;
  return {
    deps,
    sandbox,
    /** Turn 1, prompted "go". */
    turn: async (extra: Partial<TurnRequest> = {}) =>
      (await env.run(activities.runTurn, { turn: 1, specHash: policy.specHash, sandbox, input: { kind: 'prompt', parts: ['go'] }, replay: false, envelopeSeq: 1, ...extra } satisfies TurnRequest)) as TurnResult,
    end: () => env.run(activities.endSession, { workflowId, sandbox, releaseSandbox: true, status: 'stopped' as const, result: { workflowId, status: 'stopped', iterations: 1, usage: {}, costUsd: 0 } as never }),
  };
}
