// The service: starts a run and follows it to its result, then starts one and cancels it mid-turn.
// Plain node: `node service.mjs` (with `node worker.mjs` running in worker/). It installs only @durable-harness/client.
import { Client, Connection } from '@temporalio/client';
import { operatorSignerFrom, startAgentRun } from '@durable-harness/client';

const address = process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233';
const taskQueue = process.env.TASK_QUEUE ?? 'example-service';
const connection = await Connection.connect({ address });
const client = new Client({ connection });
// Identity comes from the service's own authentication, never from the model.
const identity = { tenantId: 'example-tenant', userId: 'example-user' };
// The service's operator key (DURABLE_HARNESS_OPERATOR_KEY_FILE): the workers take its cancel, with the reason, only
// because their operators file (DURABLE_HARNESS_OPERATORS_FILE) lists this key with the `operate` role.
const operator = operatorSignerFrom(undefined);

/** Prints the run's status whenever it changes, until `done` says stop. */
async function follow(run, done) {
  let last = '';
  for (;;) {
    const status = await run.status().catch(() => undefined); // not answerable before the first workflow task
    if (status) {
      const line = `${run.workflowId}: ${status.state} · turn ${status.iteration} · ${status.totalTokens} tokens · $${status.costUsd} · ${status.detail}`;
      if (line !== last) console.log((last = line));
      if (done(status)) return status;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const finished = await startAgentRun(client, { agent: 'demo', task: 'Write what you find into NOTES.md.', identity, taskQueue });
console.log(`started ${finished.workflowId}`);
const [result] = await Promise.all([finished.result(), follow(finished, (s) => !['starting', 'running'].includes(s.state))]);
console.log(`demo run ${result.status} after ${result.iterations} turn(s), $${result.costUsd}: ${result.result ?? result.reason}`);

const pondering = await startAgentRun(client, { agent: 'ponderer', task: 'Think it over.', identity, taskQueue }, { operator });
console.log(`started ${pondering.workflowId}`);
await follow(pondering, (s) => s.state === 'running' && s.iteration >= 1);
await pondering.cancel('the service no longer needs it');
const cancelled = await pondering.result();
console.log(`ponder run ${cancelled.status}: ${cancelled.reason}`);

await connection.close();
process.exitCode = result.status === 'succeeded' && cancelled.status === 'cancelled' ? 0 : 1;
