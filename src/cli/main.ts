#!/usr/bin/env node
/** `durable-harness`: run the embedded dev stack, a worker, and start, follow and operate agent runs. */
import { statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { NativeConnection, Runtime, DefaultLogger } from '@temporalio/worker';
import { loadCatalog, type Catalog } from '../catalog/index.js';
import { getAgentRun, startAgentRun, type AgentRunHandle } from '../client/index.js';
import { SqliteLedger } from '../ledger/index.js';
import { ensureSearchAttributes } from '../temporal/search-attributes.js';
import { createWorker, reapClosedRunContainers } from '../worker.js';
import type { AgentRunResult } from '../workflows/types.js';
import { startEmbeddedTemporal } from './embedded-temporal.js';
import { describeResult, followRun, progressLine } from './follow.js';
import { ledgerStatus, ledgerStatusLines } from './ledger-status.js';
import { ExitCodes, resolveSettings, type Settings } from './settings.js';

const usage = `durable-harness — run coding-agent CLIs as durable Temporal workflows

Usage:
  durable-harness dev [--demo] [--exit] [--port 7233] [--ui-port 8233]
                                      embedded Temporal dev server (state in <data>/temporal.db) + Web UI + worker;
                                      --demo starts the demo agent and follows it; --exit stops when it ends
  durable-harness worker              a worker on the task queue
  durable-harness run AGENT TASK [--detach] [--json] [--id ID] [--tenant T] [--user U]
                                      start a run and follow it until it ends
  durable-harness status RUN_ID [--json]
  durable-harness list [--limit 20] [--json]
  durable-harness cancel RUN_ID [--reason TEXT]
  durable-harness retry RUN_ID        run the failed turn of an awaiting_operator run again
  durable-harness abandon RUN_ID [--reason TEXT]
  durable-harness reply RUN_ID TEXT   answer a run that waits for a reply

Common options (or environment):
  --address HOST:PORT   TEMPORAL_ADDRESS            (default 127.0.0.1:7233)
  --namespace NAME      TEMPORAL_NAMESPACE          (default "default")
  --task-queue NAME     DURABLE_HARNESS_TASK_QUEUE  (default "durable-harness")
  --catalog FILE        DURABLE_HARNESS_CATALOG     (default config/default.yaml)
  --data DIR            DURABLE_HARNESS_DATA        (default .data)

Exit codes: 0 succeeded, 10 failed, 11 stopped by a guardrail, 12 cancelled, 13 awaiting an operator,
2 bad usage or config, 3 Temporal unreachable.`;

const options = {
  address: { type: 'string' },
  namespace: { type: 'string' },
  'task-queue': { type: 'string' },
  catalog: { type: 'string' },
  data: { type: 'string' },
  demo: { type: 'boolean' },
  exit: { type: 'boolean' },
  port: { type: 'string' },
  'ui-port': { type: 'string' },
  detach: { type: 'boolean' },
  json: { type: 'boolean' },
  id: { type: 'string' },
  tenant: { type: 'string' },
  user: { type: 'string' },
  reason: { type: 'string' },
  limit: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Flags = ReturnType<typeof parseArgs<{ options: typeof options; allowPositionals: true }>>['values'];

class UsageError extends Error {}

const out = (line: string) => process.stdout.write(`${line}\n`);
const err = (line: string) => process.stderr.write(`${line}\n`);

function exitCodeFor(result: AgentRunResult): number {
  return ExitCodes[result.status];
}

/** The catalog, reloaded when its file changes; a broken edit keeps the last good catalog and says why. */
function catalogSource(file: string): () => Catalog {
  let current = loadCatalog(file);
  let mtime = statSync(file).mtimeMs;
  return () => {
    const now = statSync(file).mtimeMs;
    if (now !== mtime) {
      mtime = now;
      try {
        current = loadCatalog(file);
      } catch (e) {
        err(`catalog change ignored: ${(e as Error).message}`);
      }
    }
    return current;
  };
}

function quietRuntime(): void {
  Runtime.install({ logger: new DefaultLogger('WARN') });
}

async function connectClient(s: Settings): Promise<{ client: Client; connection: Connection; close: () => Promise<void> }> {
  try {
    const connection = await Connection.connect({ address: s.address, connectTimeout: 5000 });
    return { client: new Client({ connection, namespace: s.namespace }), connection, close: () => connection.close() };
  } catch (e) {
    throw Object.assign(new Error(`cannot reach Temporal at ${s.address} (${(e as Error).message}). Start one with \`durable-harness dev\`, or set TEMPORAL_ADDRESS.`), { exitCode: ExitCodes.unavailable });
  }
}

function openLedgerIfPresent(s: Settings): SqliteLedger | undefined {
  const file = path.join(s.dataDir, 'ledger.sqlite');
  try {
    statSync(file);
    return SqliteLedger.open(file);
  } catch {
    return undefined;
  }
}

async function startWorker(s: Settings, connection: NativeConnection, client: Client) {
  const { worker, deps } = await createWorker({
    connection,
    namespace: s.namespace,
    taskQueue: s.taskQueue,
    catalog: catalogSource(s.catalogFile),
    dataDir: s.dataDir,
  });
  const removed = await reapClosedRunContainers(deps, client);
  if (removed.length) out(`removed ${removed.length} sandbox container(s) of closed runs: ${removed.join(', ')}`);
  return { worker, deps, running: worker.run() };
}

async function followOrPrint(run: AgentRunHandle, s: Settings, flags: Flags, ledger?: SqliteLedger): Promise<number> {
  const result = await followRun(run, { ledger, write: flags.json ? () => undefined : out });
  if (flags.json) out(JSON.stringify(result, null, 2));
  else out(describeResult(result));
  return exitCodeFor(result);
}

async function dev(flags: Flags): Promise<number> {
  const s = resolveSettings(flags);
  loadCatalog(s.catalogFile); // fail before starting anything if the catalog is broken
  quietRuntime();
  const temporal = await startEmbeddedTemporal({
    dataDir: s.dataDir,
    port: flags.port ? Number(flags.port) : 7233,
    uiPort: flags['ui-port'] ? Number(flags['ui-port']) : 8233,
    namespace: s.namespace,
    log: out,
  });
  const settings = { ...s, address: temporal.address };
  const connection = await NativeConnection.connect({ address: temporal.address });
  const { client, connection: clientConnection, close } = await connectClient(settings);
  await ensureSearchAttributes(clientConnection, s.namespace);
  const { worker, running } = await startWorker(settings, connection, client);
  out(`worker polling task queue "${s.taskQueue}" (catalog ${path.relative(process.cwd(), s.catalogFile) || s.catalogFile}, data ${s.dataDir})`);
  let code = 0;
  const stop = async () => {
    if (worker.getState() === 'RUNNING') worker.shutdown();
    await running.catch(() => undefined);
    await connection.close();
    await close();
    await temporal.stop();
  };
  process.once('SIGINT', () => void stop().then(() => process.exit(code)));
  process.once('SIGTERM', () => void stop().then(() => process.exit(code)));
  if (flags.demo) {
    const run = await startAgentRun(client, {
      agent: 'demo',
      task: 'Look around this workspace and write what you find into NOTES.md.',
      identity: { tenantId: 'local', userId: os.userInfo().username },
      taskQueue: s.taskQueue,
    });
    out(`started demo run ${run.workflowId}`);
    if (temporal.uiUrl) out(`watch it: ${temporal.uiUrl}/namespaces/${s.namespace}/workflows/${run.workflowId}`);
    const ledger = openLedgerIfPresent(s);
    code = await followOrPrint(run, s, flags, ledger);
    if (temporal.uiUrl) out(`history: ${temporal.uiUrl}/namespaces/${s.namespace}/workflows/${run.workflowId}`);
    await ledger?.close();
  }
  const interactive = process.stdin.isTTY && !process.env.CI;
  if (flags.exit || (flags.demo && !interactive)) {
    await stop();
    return code;
  }
  out('ready; press Ctrl-C to stop');
  await running;
  return code;
}

async function workerCommand(flags: Flags): Promise<number> {
  const s = resolveSettings(flags);
  quietRuntime();
  const connection = await NativeConnection.connect({ address: s.address }).catch((e: Error) => {
    throw Object.assign(new Error(`cannot reach Temporal at ${s.address} (${e.message}). Start one with \`durable-harness dev\`, or set TEMPORAL_ADDRESS.`), { exitCode: ExitCodes.unavailable });
  });
  const { client, connection: clientConnection, close } = await connectClient(s);
  await ensureSearchAttributes(clientConnection, s.namespace);
  const { worker, running } = await startWorker(s, connection, client);
  out(`worker polling task queue "${s.taskQueue}" at ${s.address}`);
  const stop = () => worker.getState() === 'RUNNING' && worker.shutdown();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  await running;
  await connection.close();
  await close();
  return 0;
}

async function withClient(flags: Flags, fn: (client: Client, s: Settings) => Promise<number>): Promise<number> {
  const s = resolveSettings(flags);
  const { client, close } = await connectClient(s);
  try {
    return await fn(client, s);
  } catch (e) {
    if (e instanceof WorkflowNotFoundError && e.workflowId) {
      // Signals and updates to a closed run also land here: say which it is.
      const status = await client.workflow.getHandle(e.workflowId).describe().then((d) => d.status.name, () => undefined);
      if (status) throw new Error(`run ${e.workflowId} has already ended (${status}); it takes no more signals or updates`);
      throw Object.assign(new Error(`no run with id ${e.workflowId} in namespace ${s.namespace}`), { exitCode: ExitCodes.usage });
    }
    throw e;
  } finally {
    await close();
  }
}

function need(positionals: string[], count: number, what: string): string[] {
  if (positionals.length < count) throw new UsageError(`missing ${what}`);
  return positionals;
}

async function main(argv: string[]): Promise<number> {
  const { values: flags, positionals } = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  const [command, ...rest] = positionals;
  if (flags.help || !command) {
    out(usage);
    return command || flags.help ? 0 : ExitCodes.usage;
  }
  switch (command) {
    case 'dev':
      return dev(flags);
    case 'worker':
      return workerCommand(flags);
    case 'run': {
      const [agent, ...taskWords] = need(rest, 2, 'AGENT and TASK: durable-harness run AGENT TASK');
      return withClient(flags, async (client, s) => {
        const run = await startAgentRun(client, {
          agent: agent!,
          task: taskWords.join(' '),
          identity: { tenantId: flags.tenant ?? 'local', userId: flags.user ?? os.userInfo().username },
          workflowId: flags.id,
          taskQueue: s.taskQueue,
        });
        if (flags.detach) {
          out(flags.json ? JSON.stringify({ workflowId: run.workflowId }) : run.workflowId);
          return 0;
        }
        if (!flags.json) out(`started ${run.workflowId}`);
        const ledger = openLedgerIfPresent(s);
        try {
          return await followOrPrint(run, s, flags, ledger);
        } finally {
          await ledger?.close();
        }
      });
    }
    case 'status': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, async (client, s) => {
        const run = getAgentRun(client, id!);
        const status = await run.status();
        const ledger = openLedgerIfPresent(s);
        const books = await ledgerStatus(run, ledger).finally(() => ledger?.close());
        if (flags.json) out(JSON.stringify({ ...status, ledger: books }, null, 2));
        else for (const line of [progressLine(status), ...ledgerStatusLines(books)]) out(line);
        if (status.state === 'awaiting_operator') return ExitCodes.awaitingOperator;
        return status.state in ExitCodes ? ExitCodes[status.state as keyof typeof ExitCodes] : 0;
      });
    }
    case 'list':
      return withClient(flags, async (client) => {
        const limit = Number(flags.limit ?? 20);
        const rows: Record<string, unknown>[] = [];
        for await (const wf of client.workflow.list({ query: `WorkflowType = 'agentRun'` })) {
          const attrs = wf.typedSearchAttributes;
          const get = (name: string) => attrs.getAll().find((p) => p.key.name === name)?.value;
          rows.push({ workflowId: wf.workflowId, status: get('DurableHarnessStatus') ?? wf.status.name, agent: get('DurableHarnessAgent'), harness: get('DurableHarnessHarness'), tenant: get('DurableHarnessTenant'), costUsd: get('DurableHarnessCostUsd'), started: wf.startTime.toISOString() });
          if (rows.length >= limit) break;
        }
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else for (const r of rows) out(`${r.workflowId}\t${r.status}\t${r.agent ?? ''}\t${r.harness ?? ''}\t${r.tenant ?? ''}\t${r.started}`);
        return 0;
      });
    case 'cancel': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, async (client) => {
        await getAgentRun(client, id!).cancel(flags.reason);
        out(`cancel requested for ${id}`);
        return 0;
      });
    }
    case 'retry': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, async (client) => {
        out(await getAgentRun(client, id!).retryTurn());
        return 0;
      });
    }
    case 'abandon': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, async (client) => {
        await getAgentRun(client, id!).abandon(flags.reason);
        out(`abandon requested for ${id}`);
        return 0;
      });
    }
    case 'reply': {
      const [id, ...words] = need(rest, 2, 'RUN_ID and TEXT');
      return withClient(flags, async (client) => {
        out(await getAgentRun(client, id!).reply(words.join(' ')));
        return 0;
      });
    }
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    if (e instanceof UsageError || (e as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      err(`${(e as Error).message}\n\n${usage}`);
      process.exit(ExitCodes.usage);
    }
    const usageError = e instanceof Error && (e.name === 'CatalogError' || e.name === 'RunIdTakenError');
    const code = (e as { exitCode?: number }).exitCode ?? (usageError ? ExitCodes.usage : 1);
    err(`durable-harness: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(code);
  },
);
