/**
 * The Docker sandbox's one door (policy `vendor`): `NetworkMode: none`, the run's gateway directory mounted read-only,
 * and the forwarder as the container's main process (the keep-alive user). From inside, as the sandbox user: the door
 * leads to the test's server on the run's socket; the host's loopback services, its interfaces and a public address
 * are unreachable; DNS fails; a UDP datagram to the host's loopback arrives nowhere; the forwarder cannot be killed;
 * the socket's directory cannot be written; a restarted container gets its door back. A missing engine FAILS.
 */
import dgram from 'node:dgram';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerSandboxProvider } from '../../src/sandbox/docker-provider.js';
import { gatewayPort } from '../../src/sandbox/forwarder.js';
import type { SandboxRef } from '../../src/sandbox/types.js';
import { doorProbe } from '../support/door-probe.js';
import { requireEngineAndImage, testDocker, testImage } from './docker-env.js';

const docker = testDocker();
const root = mkdtempSync(path.join(os.tmpdir(), 'dh-docker-door-'));
const provider = new DockerSandboxProvider({ docker, image: testImage, workspaceRoot: path.join(root, 'workspaces') });
const servers: { close(): unknown }[] = [];
const udpReceived: string[] = [];
let hostService: number;
let udpPort: number;
let ref: SandboxRef;
let door: net.Server;

async function run(argv: string[]): Promise<{ lines: string[]; code: number | null }> {
  const handle = await provider.attach(ref);
  const proc = handle.executor.exec({ argv });
  const lines: string[] = [];
  for await (const line of proc.lines) lines.push(line);
  const { code } = await proc.exit;
  await handle.release();
  return { lines, code };
}

beforeAll(async () => {
  await requireEngineAndImage(docker);
  const service = net.createServer((c) => c.end('host-secret-service\n')).listen(0, '127.0.0.1');
  await new Promise((r) => service.once('listening', r));
  hostService = (service.address() as net.AddressInfo).port;
  const udp = dgram.createSocket('udp4').on('message', (m) => udpReceived.push(m.toString()));
  await new Promise<void>((r) => udp.bind(0, '127.0.0.1', () => r()));
  udpPort = udp.address().port;
  servers.push(service, udp);
  ref = await provider.start({ workflowId: `wf-docker-door-${process.pid}`, runId: 'r1', agent: 'a', identity: { tenantId: 't', userId: 'u' }, spec: { provider: 'docker', workspaceScope: 'run', networkPolicy: 'vendor' } });
  door = net.createServer((c) => c.end('through-the-door\n')).listen(ref.gateway!.socket);
  await new Promise((r) => door.once('listening', r));
  // As the gateway does: the forwarder (uid 65534) must be able to connect.
  chmodSync(ref.gateway!.socket, 0o666);
}, 60_000);
afterAll(async () => {
  if (ref) await provider.end(ref);
  door?.close();
  for (const s of servers) s.close();
  rmSync(root, { recursive: true, force: true });
});

describe('the Docker sandbox behind its gateway (policy vendor)', () => {
  it('loopback only: the door reaches the gateway socket and nothing else does; DNS and UDP go nowhere; the forwarder cannot be killed', { timeout: 60_000 }, async () => {
    const info = await docker.getContainer(ref.id!).inspect();
    expect(info.HostConfig.NetworkMode).toBe('none');
    expect(info.Config.User).toBe('65534:65534');
    expect(info.Config.Env.filter((e) => !/^(HOME|PATH)=/.test(e))).toEqual([]);
    expect(info.Mounts.find((m) => m.Destination === '/run/durable-harness')).toMatchObject({ RW: false, Source: path.dirname(ref.gateway!.socket) });
    const targets: Record<string, [string, number]> = { door: ['127.0.0.1', gatewayPort], hostLoopback: ['127.0.0.1', hostService], publicIp: ['1.1.1.1', 443] };
    Object.values(os.networkInterfaces()).flat().filter((a) => a && a.family === 'IPv4' && !a.internal).forEach((a, i) => (targets[`hostInterface${i}`] = [a!.address, hostService]));
    const { lines, code } = await run(['node', '-e', doorProbe, JSON.stringify(targets), String(udpPort)]);
    expect(code).toBe(0);
    const reached = JSON.parse(lines.at(-1)!) as Record<string, string>;
    expect(reached.door).toBe('connected:through-the-door');
    expect(reached.hostLoopback).toBe('ECONNREFUSED');
    expect(reached.publicIp).toMatch(/^(ENETUNREACH|EHOSTUNREACH)$/);
    for (const [name, value] of Object.entries(reached)) if (name.startsWith('hostInterface')) expect(value, name).toMatch(/^(ENETUNREACH|EHOSTUNREACH)$/);
    expect(reached.dns).toMatch(/^(ENOTFOUND|EAI_AGAIN|ECONNREFUSED)$/);
    await new Promise((r) => setTimeout(r, 200));
    expect(udpReceived).toEqual([]);
    expect(reached.killForwarder).toBe('EPERM');
  });

  it('the socket’s directory is read-only inside: the harness cannot replace the door', { timeout: 30_000 }, async () => {
    const { lines } = await run(['sh', '-c', 'touch /run/durable-harness/x 2>&1 || echo refused; rm -f /run/durable-harness/gateway.sock 2>&1 || echo refused']);
    expect(lines.filter((l) => l === 'refused')).toHaveLength(2);
  });

  it('a stopped container started again gets its door back', { timeout: 60_000 }, async () => {
    await docker.getContainer(ref.id!).stop({ t: 0 });
    const { lines } = await run(['node', '-e', `require('net').connect(${gatewayPort}, '127.0.0.1').on('data', (d) => process.stdout.write(d)).on('error', (e) => console.log(e.code))`]);
    expect(lines).toEqual(['through-the-door']);
  });
});
