/**
 * The sandbox's one door, on the sandbox's side: a tiny forwarder that listens on the sandbox's own
 * `127.0.0.1:<gatewayPort>` and pipes every connection, byte for byte, to the run's egress gateway on a Unix socket
 * (src/gateway). The sandbox has no network interface but its loopback, so this is the only way out; what may pass
 * is the gateway's decision, never the forwarder's. It runs as a user the harness cannot signal: in a Docker sandbox this
 * script, as the container's keep-alive user; in a local sandbox the containment helper's own (native/dh-contain.c,
 * `--forward`), as the worker's user inside the turn's network namespace (docs/network.md).
 */
import { createHash } from 'node:crypto';
import path from 'node:path';

/** The port the harness's base URL and proxy variables name, inside every sandbox that has a gateway. */
export const gatewayPort = 18480;

/** Where the run's gateway directory is mounted inside a Docker sandbox (read-only). */
export const containerGatewayDir = '/run/durable-harness';

/** The socket's file name in the run's gateway directory. */
export const gatewaySocketName = 'gateway.sock';

/** Connections the forwarder holds at once (the gateway bounds them again, per run). */
const maxConnections = 256;

/**
 * The forwarder as a program for `node -e <script> <socket> <port>`: no file in the sandbox. A socket it cannot reach
 * closes that one client connection; nothing ends the forwarder but a signal. It prints `ready` once it listens.
 */
export const forwarderScript = [
  "const net = require('net');",
  "const path = require('path');",
  'const [socketPath, port] = process.argv.slice(1);',
  // Connected by its name inside its directory, so a long data directory is no obstacle (sun_path is 107 bytes).
  'process.chdir(path.dirname(socketPath));',
  "const socket = './' + path.basename(socketPath);",
  'let open = 0;',
  'const server = net.createServer((client) => {',
  `  if (open >= ${maxConnections}) return client.destroy();`,
  '  open += 1;',
  '  const door = net.connect(socket);',
  '  let closed = false;',
  '  const close = () => { if (!closed) { closed = true; open -= 1; } client.destroy(); door.destroy(); };',
  "  for (const s of [client, door]) { s.on('error', close); s.on('close', close); }",
  '  client.pipe(door); door.pipe(client);',
  '});',
  "server.on('error', (e) => { console.error('durable-harness forwarder: ' + e.message); process.exit(1); });",
  "process.on('uncaughtException', (e) => console.error('durable-harness forwarder: ' + e.message));",
  "server.listen(Number(port), '127.0.0.1', () => console.log('ready'));",
].join('\n');

/** argv of the forwarder for a node binary, a socket path and the port. */
export function forwarderArgv(node: string, socket: string, port = gatewayPort): string[] {
  return [node, '-e', forwarderScript, socket, String(port)];
}

/** The run's gateway directory under `gatewayRoot` (a hash of the workflow id: short, safe, one per run). */
export function gatewayDirFor(gatewayRoot: string, workflowId: string): string {
  return path.join(gatewayRoot, createHash('sha256').update(workflowId).digest('hex').slice(0, 16));
}

/**
 * The run's gateway socket on the worker's host. Its length is not capped by the kernel's 107-byte sun_path: the
 * gateway binds it through a descriptor of its directory, and the forwarder connects from inside that directory.
 */
export function gatewaySocketFor(gatewayRoot: string, workflowId: string): string {
  return path.join(gatewayDirFor(gatewayRoot, workflowId), gatewaySocketName);
}
