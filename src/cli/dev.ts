/**
 * `durable-harness dev` (embedded Temporal + Web UI + worker) and `durable-harness worker`: long-running processes
 * that log like an operator wants to read them and stop cleanly — Temporal server included — on SIGINT and SIGTERM.
 */
import { err, out } from './io.js';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection, isGrpcServiceError } from '@temporalio/client';
import { NativeConnection, Runtime } from '@temporalio/worker';
import {
  codecTokensFromEnvironment,
  dataConverterFromEnvironment,
  generateCodecToken,
  parseCorsOrigins,
  payloadCodecFromEnvironment,
  startCodecServer,
  type CodecServer,
} from '../codec/index.js';
import { describeLedger } from '../ledger/index.js';
import { decisionModeFromEnvironment, operatorsFromEnvironment, type DecisionMode } from '../operators/index.js';
import { observabilityFromEnvironment, startTracing, type WorkerTracing } from '../observability/index.js';
import { loadCatalog, watchCatalogFile, type Catalog } from '../catalog/index.js';
import { createAgentClient, startAgentRun } from '../client/index.js';
import { ensureSearchAttributes } from '../temporal/search-attributes.js';
import { createWorker, reapClosedRunContainers } from '../worker.js';
import { reconcileClosedRuns } from '../temporal/reconcile-runs.js';
import { prebuiltWorkflowBundle } from '../workflow-bundle.js';
import { roundUsd } from '../contracts/money.js';
import type { AgentRunResult } from '../workflows/types.js';
import { allSearchAttributes } from '../workflows/search-attributes.js';
import { startEmbeddedTemporal } from './embedded-temporal.js';
import { CliError, ExitCodes, exitCodeForResult, type ExitCode } from './exit-codes.js';
import { describeResult, followRun, progressLine } from './follow.js';
import { OperatorLog } from './operator-log.js';
import { connectOptionsFor, openLedgerIfPresent, unreachableError, type Settings } from './settings.js';
import type { TemporalConnectOptions } from '../client/connect.js';


/** The catalog, reloaded when its file changes; a broken edit keeps the last good catalog and says why. */
function catalogSource(file: string): () => Catalog {
  return watchCatalogFile(file, (e) => err(`catalog change ignored: ${e.message}`));
}

/**
 * Installs the operator log as the Temporal runtime's logger. The runtime's own signal handling is off: these
 * commands stop in their own order (worker, connections, then the Temporal server).
 */
function installRuntime(metrics: ReturnType<typeof observabilityFromEnvironment>['metrics']): { setClient(client: Client): void } {
  let client: Client | undefined;
  Runtime.install({
    shutdownSignals: [],
    ...(metrics ? { telemetryOptions: { metrics } } : {}),
    logger: new OperatorLog({
      write: out,
      describeEnd: async (workflowId, runId) => {
        if (!client) return 'ended';
        const result = (await client.workflow.getHandle(workflowId, runId).result()) as AgentRunResult;
        return describeResult({ ...result, costUsd: roundUsd(result.costUsd) }).split('\n')[0]!;
      },
    }),
  });
  return { setClient: (c) => (client = c) };
}

/** Calls `stop` once on the first SIGINT/SIGTERM; a second signal exits at once. */
function onStopSignal(stop: (signal: NodeJS.Signals) => Promise<void>): () => void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(ExitCodes.interrupted);
    stopping = true;
    void stop(signal);
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

async function connectNative(s: Settings, options: TemporalConnectOptions): Promise<NativeConnection> {
  try {
    return await NativeConnection.connect(options);
  } catch (e) {
    throw await unreachableError(s, e);
  }
}

/**
 * The run search attributes on the namespace. A server that does not let a worker add them — Temporal Cloud takes them
 * from a namespace admin (tcld) — gets a configuration error naming each, instead of a stack trace.
 */
async function registerSearchAttributes(connection: Connection, namespace: string): Promise<void> {
  try {
    await ensureSearchAttributes(connection, namespace);
  } catch (e) {
    // PERMISSION_DENIED, UNIMPLEMENTED
    if (!isGrpcServiceError(e) || (e.code !== 7 && e.code !== 12)) throw e;
    const names = allSearchAttributes.map((a) => `--search-attribute "${a.name}=${a.type[0]}${a.type.slice(1).toLowerCase()}"`).join(' ');
    throw new CliError(
      `this worker may not register the run search attributes on namespace ${namespace} (${e.details.split('\n')[0]}). Add them once as a namespace admin ` +
        `(Temporal Cloud: \`tcld namespace search-attributes add --namespace ${namespace} ${names}\`; a server of your own: \`temporal operator search-attribute create\`), then start the worker again`,
      ExitCodes.usage,
    );
  }
}

type Telemetry = { runtime: ReturnType<typeof installRuntime>; tracing?: WorkerTracing };

/**
 * The SDK runtime (operator log; Prometheus/OTLP metrics when configured) and tracing when configured. First thing:
 * the runtime is installed once per process, and the embedded server already starts on it.
 */
function startTelemetry(): Telemetry {
  const config = observabilityFromEnvironment();
  const runtime = installRuntime(config.metrics);
  if (config.metrics && 'prometheus' in config.metrics) out(`Prometheus metrics at http://${config.metrics.prometheus.bindAddress}/metrics`);
  if (!config.tracing) return { runtime };
  out(`tracing to ${config.tracing.url} as ${config.tracing.serviceName}`);
  return { runtime, tracing: startTracing(config.tracing) };
}

/** Worker, client and search attributes on one server; `close` undoes all of it, quietly. */
async function serve(s: Settings, options: { shutdownGraceTime?: string; decisions: DecisionMode; telemetry: Telemetry }) {
  // Payload keys and certificate files are checked before connecting: configuration errors, not an unreachable server.
  const dataConverter = dataConverterFromEnvironment();
  const connectOptions = await connectOptionsFor(s);
  const { runtime, tracing } = options.telemetry;
  const native = await connectNative(s, connectOptions);
  const connection = await Connection.connect({ ...connectOptions, connectTimeout: 5000 });
  const client = createAgentClient(connection, { namespace: s.namespace, dataConverter });
  runtime.setClient(client);
  await registerSearchAttributes(connection, s.namespace);
  const { worker, deps } = await createWorker({
    connection: native,
    namespace: s.namespace,
    taskQueue: s.taskQueue,
    catalog: catalogSource(s.catalogFile),
    dataDir: s.dataDir,
    shutdownGraceTime: options.shutdownGraceTime,
    decisions: options.decisions,
    tracing,
  });
  const removed = await reapClosedRunContainers(deps, client);
  if (removed.length) out(`removed ${removed.length} sandbox container(s) of closed runs: ${removed.join(', ')}`);
  const reconciled = await reconcileClosedRuns(deps.ledger, client, out);
  if (reconciled.length) out(`closed ${reconciled.length} run(s) Temporal terminated or timed out in the ledger: ${reconciled.map((r) => `${r.workflowId} (${r.status})`).join(', ')}`);
  out(`ledger: ${describeLedger(process.env, s.dataDir)}`);
  // The worker image bundles the workflow code at build time (docker/worker.Dockerfile); a checkout bundles at start.
  const bundle = prebuiltWorkflowBundle(dataConverter, tracing !== undefined);
  out(`workflow code: ${bundle && 'codePath' in bundle ? `bundled ahead of time (${bundle.codePath})` : 'bundled at start'}`);
  const operators = deps.operators?.().operators ?? [];
  out(
    options.decisions === 'signed'
      ? `operator decisions: signed (${operators.length ? `operators ${operators.map((o) => `${o.name} [${o.roles.join(', ')}]`).join('; ')}` : 'NO operators configured: set DURABLE_HARNESS_OPERATORS_FILE, or nobody can approve, reply, retry or cancel'})`
      : 'operator decisions: NOT authenticated (trusted-network): whoever reaches Temporal decides; set DURABLE_HARNESS_DECISIONS=signed to require operator signatures',
  );
  out(worker.hostQueue ? `host queue: ${worker.hostQueue} (runs with a local workspace on this worker come back here; docs/multi-host.md)` : 'host affinity: off (DURABLE_HARNESS_HOST_AFFINITY)');
  const running = worker.run();
  return {
    client,
    worker,
    running,
    /** A client on the worker's own connection, for eager workflow start (the first task comes back in the start response). */
    eagerClient: createAgentClient(native, { namespace: s.namespace, dataConverter }),
    async close() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close().catch(() => undefined);
      await native.close().catch(() => undefined);
      await tracing?.shutdown();
    },
  };
}

export async function devCommand(
  flags: { demo?: boolean; exit?: boolean; json?: boolean; port?: string; 'ui-port'?: string; 'codec-port'?: string; 'cors-origin'?: string[] },
  s: Settings,
): Promise<ExitCode> {
  loadCatalog(s.catalogFile); // fail before starting anything if the catalog is broken
  const port = (flag: string | undefined, fallback: number, name: string) => {
    const n = flag === undefined ? fallback : Number(flag);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new CliError(`--${name} must be a TCP port number, got "${flag}"`, ExitCodes.usage);
    return n;
  };
  const uiPort = port(flags['ui-port'], 8233, 'ui-port');
  // Encrypted payloads: the Web UI shows them decoded through a codec server holding the same keys.
  const codec = payloadCodecFromEnvironment();
  let codecServer: CodecServer | undefined;
  let uiCodecEndpoint: string | undefined;
  if (codec) {
    // The embedded UI cannot send a header, so its endpoint carries a token of this process's own in its path;
    // it is never printed. Tokens the operator configured (for the Temporal CLI, say) work beside it.
    const uiToken = generateCodecToken();
    codecServer = await startCodecServer({
      codec,
      tokens: [{ name: 'dev-ui', token: uiToken, namespaces: [s.namespace] }, ...codecTokensFromEnvironment()],
      operators: operatorsFromEnvironment(),
      // The UI encodes the input of the signals and updates an operator sends from it.
      allowEncode: true,
      port: port(flags['codec-port'], 8234, 'codec-port'),
      corsOrigins: [`http://127.0.0.1:${uiPort}`, `http://localhost:${uiPort}`, ...parseCorsOrigins(flags['cors-origin'] ?? [])],
      log: err,
    });
    uiCodecEndpoint = `${codecServer.url}/t/${uiToken}`;
    out(`payloads encrypted (key ${codec.currentKeyId}); codec server for the Web UI at ${codecServer.url} (the UI holds its token)`);
  }
  const telemetry = startTelemetry();
  const temporal = await startEmbeddedTemporal({
    dataDir: s.dataDir,
    port: port(flags.port, 7233, 'port'),
    uiPort,
    namespace: s.namespace,
    uiCodecEndpoint,
    log: out,
  });
  let served: Awaited<ReturnType<typeof serve>> | undefined;
  let code: ExitCode = ExitCodes.succeeded;
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      await served?.close();
      await temporal.stop();
      await codecServer?.close();
    })());
  const removeHandlers = onStopSignal(async (signal) => {
    out(`${signal === 'SIGINT' ? '\n' : ''}stopping: worker, then the Temporal server`);
    await stop();
    process.exit(code);
  });
  try {
    // A turn still running at Ctrl-C is interrupted after a second; the run retries it when dev is back.
    // dev is one machine's development loop: decisions are taken unsigned unless DURABLE_HARNESS_DECISIONS says otherwise.
    const decisions = decisionModeFromEnvironment(process.env, 'trusted-network');
    // Its own server, on this machine, without TLS.
    const local = { ...s, address: temporal.address, temporal: { ...s.temporal, address: temporal.address, connectOptions: () => ({ address: temporal.address }) } };
    served = await serve(local, { shutdownGraceTime: '1s', decisions, telemetry });
    out(`worker polling task queue "${s.taskQueue}" (catalog ${path.relative(process.cwd(), s.catalogFile) || s.catalogFile}, data ${s.dataDir})`);
    if (flags.demo) {
      // Started on the worker's own connection with eager start: the first workflow task comes straight back
      // to this worker in the start response instead of through a poll.
      const run = await startAgentRun(served.eagerClient, {
        agent: 'demo',
        task: 'Look around this workspace and write what you find into NOTES.md.',
        identity: { tenantId: 'local', userId: os.userInfo().username },
        taskQueue: s.taskQueue,
        eager: true,
      });
      out(`started demo run ${run.workflowId}`);
      const link = temporal.uiUrl && `${temporal.uiUrl}/namespaces/${s.namespace}/workflows/${run.workflowId}`;
      if (link) out(`watch it: ${link}`);
      const ledger = openLedgerIfPresent(s);
      try {
        const end = await followRun(run, { ledger, wait: true, onProgress: (status, doing) => out(progressLine(status, doing)) });
        if (end.kind === 'ended') {
          out(describeResult(end.result));
          code = exitCodeForResult(end.result);
        }
      } finally {
        await ledger?.close();
      }
      if (link) out(`history: ${link}`);
    }
    const interactive = process.stdin.isTTY && !process.env.CI;
    if (flags.exit || (flags.demo && !interactive)) return code;
    out('ready; press Ctrl-C to stop');
    await served.running;
    return code;
  } finally {
    removeHandlers();
    await stop();
  }
}

export async function workerCommand(s: Settings): Promise<ExitCode> {
  loadCatalog(s.catalogFile);
  dataConverterFromEnvironment(); // a bad payload key fails before anything starts
  const served = await serve(s, { decisions: decisionModeFromEnvironment(process.env, 'signed'), telemetry: startTelemetry() });
  out(`worker polling task queue "${s.taskQueue}" at ${s.address} (${s.temporal.security})`);
  const removeHandlers = onStopSignal(async () => {
    out('stopping the worker');
    await served.close();
  });
  try {
    await served.running;
  } finally {
    removeHandlers();
    await served.close();
  }
  return ExitCodes.succeeded;
}
