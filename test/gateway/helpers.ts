/** A gateway on a temporary socket with its records collected, and plain clients that speak to it over the socket. */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Agent, request } from 'undici';
import type { ModelCall, NetworkRecord } from '../../src/contracts/network.js';
import { openGateway, type Gateway, type GatewayOptions } from '../../src/gateway/index.js';

export interface TestGateway {
  readonly gateway: Gateway;
  readonly records: NetworkRecord[];
  readonly calls: ModelCall[];
  /** An undici dispatcher whose connections go to the gateway's socket (as the forwarder's would). */
  readonly client: Agent;
  /** Waits until `n` model calls are metered (bounded). */
  waitCalls(n: number): Promise<ModelCall[]>;
  close(): Promise<void>;
}

export async function startGateway(options: Omit<GatewayOptions, 'socketPath' | 'onRecord' | 'onModelCall'> & Partial<Pick<GatewayOptions, 'onRecord'>>): Promise<TestGateway> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-gw-'));
  const records: NetworkRecord[] = [];
  const calls: ModelCall[] = [];
  const gateway = await openGateway({
    ...options,
    socketPath: path.join(dir, 'gateway.sock'),
    onRecord: (r) => {
      records.push(r);
      options.onRecord?.(r);
    },
    onModelCall: (c) => void calls.push(c),
  });
  const client = new Agent({ connect: { socketPath: gateway.socketPath } });
  return {
    gateway,
    records,
    calls,
    client,
    async waitCalls(n) {
      const deadline = Date.now() + 5_000;
      while (calls.length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      return calls;
    },
    async close() {
      await client.close().catch(() => undefined);
      await gateway.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The sandbox-side origin a client uses (the forwarder's port; any port: the Host header is all the gateway sees). */
export const sandboxOrigin = 'http://127.0.0.1:4000';

/** A JSON POST through the gateway, answered as text. */
export async function post(
  t: TestGateway,
  urlPath: string,
  body: unknown,
  headers: Record<string, string>,
): Promise<{ status: number; text: string; headers: Record<string, string | string[] | undefined> }> {
  const res = await request(`${sandboxOrigin}${urlPath}`, {
    method: 'POST',
    dispatcher: t.client,
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.statusCode, text: await res.body.text(), headers: res.headers };
}

/** Writes raw bytes to a socket and reads until it closes or `ms` pass (for what a well-behaved client cannot send). */
export function raw(socketPath: string, bytes: string, ms = 2_000): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(), ms);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    socket.write(bytes);
  });
}
