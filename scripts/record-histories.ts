/**
 * `npm run record-histories`: re-records the replay suite's histories (test/replay/histories/*.json) by running
 * every scenario of test/replay/scenarios.ts through the real workflow, on a fresh dev server, with a fixed data
 * directory, task queue and worker identity, so re-recordings differ only in ids and timestamps.
 * Run it after a deliberate change to the workflow's command sequence (see docs/VERSIONING.md).
 */
import { rmSync, mkdirSync, writeFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { parseCatalog } from '../src/catalog/index.js';
import { getAgentRun } from '../src/client/index.js';
import { findTemporalCli, temporalCliInstallHint } from '../src/temporal/cli-path.js';
import { startDevServer } from '../src/temporal/dev-server.js';
import { createWorker } from '../src/worker.js';
import { recordingCatalog, repoRoot, scenarios, writeHistory } from '../test/replay/scenarios.js';

const only = new Set(process.argv.slice(2));
const outDir = path.join(repoRoot, 'test', 'replay', 'histories');
const dataDir = '/tmp/durable-harness-record-histories';
const taskQueue = 'record-histories';

const cli = findTemporalCli();
if (!cli) throw new Error(`recording needs the Temporal CLI. ${temporalCliInstallHint}`);
Runtime.install({ logger: new DefaultLogger('ERROR') });
rmSync(dataDir, { recursive: true, force: true });
const scriptsDir = path.join(dataDir, 'scripts');
mkdirSync(scriptsDir, { recursive: true });
const catalog = parseCatalog(recordingCatalog(scriptsDir), 'recording catalog');

const server = await startDevServer({ cliPath: cli.path });
const nativeConnection = await NativeConnection.connect({ address: server.address });
const { worker, deps } = await createWorker({ connection: nativeConnection, taskQueue, catalog: () => catalog, dataDir, env: {}, identity: 'record-histories', hostId: 'record-host', decisions: 'trusted-network' });
const running = worker.run();
const connection = await Connection.connect({ address: server.address });
const client = new Client({ connection });
let failed = false;
try {
  mkdirSync(outDir, { recursive: true });
  if (only.size === 0) for (const f of readdirSync(outDir).filter((f) => f.endsWith('.json'))) rmSync(path.join(outDir, f));
  for (const scenario of scenarios) {
    if (only.size > 0 && !only.has(scenario.name)) continue;
    const ctx = {
      client,
      taskQueue,
      dataDir,
      script(name: string, turns: Record<string, unknown>[]) {
        writeFileSync(path.join(scriptsDir, `${name}.json`), JSON.stringify({ turns }));
        return `replay scenario script:${name}`;
      },
    };
    try {
      const ids = await scenario.run(ctx);
      // Through the typed handle: a failed or cancelled run is a Failed or Canceled workflow (docs/OUTCOMES.md).
      const result = await getAgentRun(client, ids[0]!).result();
      const ended = [result.status, result.failureType ?? result.guardrail].filter(Boolean).join(':');
      if (ended !== scenario.expect) throw new Error(`ended ${ended}, expected ${scenario.expect}: the scenario no longer covers what it says (${scenario.covers})`);
      for (const workflowId of ids) {
        // Follow the continue-as-new chain from the first execution.
        let runId: string | undefined = (await client.workflow.getHandle(workflowId).describe()).raw.workflowExecutionInfo?.firstRunId || undefined;
        for (let n = 1; runId; n++) {
          const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
          const file = writeHistory(outDir, workflowId, n, historyToJSON(history));
          console.log(`${scenario.name}: ${path.relative(repoRoot, file)} (${history.events?.length ?? 0} events)`);
          runId = history.events?.at(-1)?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? undefined;
        }
      }
    } catch (err) {
      failed = true;
      console.error(`${scenario.name}: FAILED: ${err instanceof Error ? err.stack : String(err)}`);
    }
  }
} finally {
  worker.shutdown();
  await running;
  await nativeConnection.close();
  await connection.close();
  await deps.ledger.close();
  await server.stop();
}
if (failed) process.exit(1);
