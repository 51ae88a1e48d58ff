/**
 * The local sandbox's one door (policy `vendor`): every process has its own network namespace, whose only way out
 * is the forwarder on 127.0.0.1:<gatewayPort> to the run's gateway socket. From inside, as an unprivileged sandbox
 * user: the door leads to the test's server on that socket; the host's loopback services (stand-ins for Temporal,
 * PostgreSQL, the vendor), the host's interfaces and a public address are unreachable; DNS fails; a UDP datagram to
 * the host's loopback arrives nowhere; the forwarder cannot be killed. Needs a root worker (this machine's).
 */
import dgram from 'node:dgram';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gatewayPort } from '../../src/sandbox/forwarder.js';
import { LocalSandboxProvider } from '../../src/sandbox/local-provider.js';
import type { SandboxRef } from '../../src/sandbox/types.js';
import { doorProbe } from '../support/door-probe.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'dh-door-'));
// mkdtemp makes it 0700: the sandbox user must traverse it to reach its workspace.
chmodSync(root, 0o711);
const provider = new LocalSandboxProvider({ root: path.join(root, 'workspaces') });
const servers: { close(): unknown }[] = [];
let hostService: number;
let udpPort: number;
const udpReceived: string[] = [];

function hostAddresses(): string[] {
  return Object.values(os.networkInterfaces()).flat().filter((a) => a && a.family === 'IPv4' && !a.internal).map((a) => a!.address);
}

beforeAll(async () => {
  const service = net.createServer((c) => c.end('host-secret-service\n')).listen(0, '127.0.0.1');
  await new Promise((r) => service.once('listening', r));
  hostService = (service.address() as net.AddressInfo).port;
  const udp = dgram.createSocket('udp4').on('message', (m) => udpReceived.push(m.toString()));
  await new Promise<void>((r) => udp.bind(0, '127.0.0.1', () => r()));
  udpPort = udp.address().port;
  servers.push(service, udp);
});
afterAll(() => {
  for (const s of servers) s.close();
  rmSync(root, { recursive: true, force: true });
});

async function probeIn(ref: SandboxRef): Promise<Record<string, string>> {
  const door = net.createServer((c) => c.end('through-the-door\n')).listen(ref.gateway!.socket);
  await new Promise((r) => door.once('listening', r));
  try {
    const handle = await provider.attach(ref);
    const targets: Record<string, [string, number]> = { door: ['127.0.0.1', gatewayPort], hostLoopback: ['127.0.0.1', hostService], publicIp: ['1.1.1.1', 443] };
    hostAddresses().forEach((a, i) => (targets[`hostInterface${i}`] = [a, hostService]));
    const proc = handle.executor.exec({ argv: [process.execPath, '-e', doorProbe, JSON.stringify(targets), String(udpPort)] });
    const lines: string[] = [];
    for await (const line of proc.lines) lines.push(line);
    const exit = await proc.exit;
    expect(exit.code, proc.stderrTail()).toBe(0);
    await handle.release();
    return JSON.parse(lines.at(-1)!) as Record<string, string>;
  } finally {
    door.close();
  }
}

const start = (workflowId: string, options?: Record<string, unknown>) =>
  provider.start({ workflowId, runId: 'r1', agent: 'a', identity: { tenantId: 't', userId: 'u' }, spec: { provider: 'local', workspaceScope: 'run', networkPolicy: 'vendor', ...(options ? { options } : {}) } });

describe('the local sandbox behind its gateway (policy vendor)', () => {
  it('the ref names the run’s socket and port; the isolation is frozen into it', async () => {
    const ref = await start('wf-door-ref');
    expect(ref.gateway).toEqual({ socket: expect.stringMatching(/runtime\/gateway\/[0-9a-f]{16}\/gateway\.sock$/), port: gatewayPort });
    expect(ref.settings).toMatchObject({ network: 'gateway', gatewaySocket: ref.gateway!.socket });
  });

  it('as a sandbox user: the door reaches the gateway socket and nothing else does; DNS and UDP go nowhere; the forwarder cannot be killed', { timeout: 60_000 }, async () => {
    const reached = await probeIn(await start('wf-door-user', { user: '64071:64071' }));
    expect(reached.door).toBe('connected:through-the-door');
    expect(reached.hostLoopback).toBe('ECONNREFUSED');
    expect(reached.publicIp).toMatch(/^(ENETUNREACH|EHOSTUNREACH)$/);
    for (const [name, value] of Object.entries(reached)) if (name.startsWith('hostInterface')) expect(value, name).toMatch(/^(ENETUNREACH|EHOSTUNREACH)$/);
    expect(reached.dns).toMatch(/^(ENOTFOUND|EAI_AGAIN|ECONNREFUSED)$/);
    await new Promise((r) => setTimeout(r, 200));
    expect(udpReceived).toEqual([]);
    expect(reached.killForwarder).toBe('EPERM');
  });

  it('policy none has no door: the same port is refused', { timeout: 30_000 }, async () => {
    const ref = await provider.start({ workflowId: 'wf-door-none', runId: 'r1', agent: 'a', identity: { tenantId: 't', userId: 'u' }, spec: { provider: 'local', workspaceScope: 'run', networkPolicy: 'none' } });
    expect(ref.gateway).toBeUndefined();
    const handle = await provider.attach(ref);
    const proc = handle.executor.exec({ argv: [process.execPath, '-e', `require('net').connect(${gatewayPort}, '127.0.0.1').on('connect', () => console.log('connected')).on('error', (e) => console.log(e.code))`] });
    const lines: string[] = [];
    for await (const line of proc.lines) lines.push(line);
    expect(lines).toEqual(['ECONNREFUSED']);
    await handle.release();
  });

  it('containment process-group is refused for a gateway policy, saying why', async () => {
    await expect(start('wf-door-pg', { containment: 'process-group' })).rejects.toThrow(/needs containment "pid-namespace".*forwarder to the run's egress gateway must die with the turn/);
  });
});
