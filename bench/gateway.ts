/**
 * `npm run bench -- gateway`: what the egress gateway adds to a model call. Against the fake vendor on 127.0.0.1,
 * interleaved pairs of the same streamed Anthropic call: direct to the vendor, and through the sandbox's path
 * (client → a forwarder-like TCP→Unix pipe → the gateway → the vendor). The gateway runs in a child process (the
 * "worker"), so its CPU per call is its own.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Pool } from 'undici';
import { anthropicMessages } from '../test/e2e/fake-vendor/anthropic-messages.js';
import { startFakeVendor } from '../test/e2e/fake-vendor/server.js';
import { percentile } from './stats.js';

export interface GatewayFigures {
  readonly calls: number;
  readonly direct: Timings;
  readonly gateway: Timings;
  /** Median of the per-pair differences (gateway − direct), ms. */
  readonly addedP50Ms: number;
  readonly addedFirstByteP50Ms: number;
  /** The gateway process's CPU (user + system) per call, ms. */
  readonly cpuMsPerCall: number;
  /** Calls the gateway metered with the usage the vendor served. */
  readonly meteredExactly: number;
}

interface Timings {
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly firstByteP50Ms: number;
  readonly firstByteP99Ms: number;
}

type FromChild = { ready: string; socketPath: string } | { cpuMicros: number } | { metered: number };

/** Runs the comparison: `calls` interleaved pairs (default 200) after a warm-up. */
export async function benchGateway(options: { calls?: number } = {}): Promise<GatewayFigures> {
  const calls = options.calls ?? 200;
  const usage = { input: 1200, output: 80, cacheRead: 300, cacheWrite: 20, reasoning: 0 };
  const vendor = await startFakeVendor({ handlers: { '/v1/messages': anthropicMessages }, fallback: () => ({ text: 'a short streamed answer for the bench', usage }) });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-bench-gw-'));
  const child = fork(fileURLToPath(import.meta.url), ['--gateway-child', vendor.url, path.join(dir, 'gateway.sock')], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let forwarder: net.Server | undefined;
  try {
    const ready = await ask(child, undefined, (m): m is { ready: string; socketPath: string } => 'ready' in m);
    // What the sandbox's forwarder does: a loopback port piped byte for byte to the gateway's socket.
    forwarder = net.createServer((inbound) => {
      inbound.setNoDelay(true);
      const outbound = net.connect(ready.socketPath);
      inbound.pipe(outbound).pipe(inbound);
      const end = () => (inbound.destroy(), outbound.destroy());
      inbound.on('error', end).on('close', end);
      outbound.on('error', end).on('close', end);
    });
    await new Promise<void>((r) => forwarder!.listen(0, '127.0.0.1', r));
    const port = (forwarder.address() as AddressInfo).port;
    const direct = new Pool(vendor.url, { connections: 1 });
    const gated = new Pool(`http://127.0.0.1:${port}`, { connections: 1 });
    const call = async (pool: Pool, key: string): Promise<{ total: number; firstByte: number }> => {
      const t0 = performance.now();
      const res = await pool.request({ path: '/v1/messages', method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'claude-bench', stream: true, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }) });
      let firstByte = 0;
      for await (const _chunk of res.body) firstByte ||= performance.now() - t0;
      if (res.statusCode !== 200) throw new Error(`bench gateway: a call answered ${res.statusCode}`);
      return { total: performance.now() - t0, firstByte };
    };
    for (let i = 0; i < 30; i++) {
      await call(direct, 'sk-bench');
      await call(gated, ready.ready);
    }
    const cpuBefore = (await ask(child, 'cpu', (m): m is { cpuMicros: number } => 'cpuMicros' in m)).cpuMicros;
    const d: { total: number; firstByte: number }[] = [];
    const g: { total: number; firstByte: number }[] = [];
    for (let i = 0; i < calls; i++) {
      // Alternate which goes first so neither always runs on a warmer loop.
      if (i % 2 === 0) {
        d.push(await call(direct, 'sk-bench'));
        g.push(await call(gated, ready.ready));
      } else {
        g.push(await call(gated, ready.ready));
        d.push(await call(direct, 'sk-bench'));
      }
    }
    const cpuAfter = (await ask(child, 'cpu', (m): m is { cpuMicros: number } => 'cpuMicros' in m)).cpuMicros;
    const metered = (await ask(child, 'metered', (m): m is { metered: number } => 'metered' in m)).metered;
    await direct.close();
    await gated.close();
    const timings = (xs: typeof d): Timings => ({
      p50Ms: percentile(xs.map((x) => x.total), 50),
      p99Ms: percentile(xs.map((x) => x.total), 99),
      firstByteP50Ms: percentile(xs.map((x) => x.firstByte), 50),
      firstByteP99Ms: percentile(xs.map((x) => x.firstByte), 99),
    });
    return {
      calls,
      direct: timings(d),
      gateway: timings(g),
      addedP50Ms: percentile(g.map((x, i) => x.total - d[i]!.total), 50),
      addedFirstByteP50Ms: percentile(g.map((x, i) => x.firstByte - d[i]!.firstByte), 50),
      cpuMsPerCall: (cpuAfter - cpuBefore) / 1000 / calls,
      meteredExactly: metered,
    };
  } finally {
    child.kill();
    forwarder?.close();
    await vendor.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Sends `question` (if any) to the child and waits for the answer `is` accepts (30 s at most). */
function ask<T extends FromChild>(child: ChildProcess, question: string | undefined, is: (m: FromChild) => m is T): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('bench gateway: the gateway process did not answer in 30 s')), 30_000);
    const onMessage = (m: FromChild) => {
      if (!is(m)) return;
      clearTimeout(timer);
      child.off('message', onMessage);
      resolve(m);
    };
    child.on('message', onMessage);
    child.once('exit', (code) => reject(new Error(`bench gateway: the gateway process exited (${code})`)));
    if (question) child.send(question);
  });
}

export function printGateway(f: GatewayFigures): void {
  const row = (name: string, t: Timings) =>
    `  ${name.padEnd(16)} p50 ${t.p50Ms.toFixed(2).padStart(6)} ms  p99 ${t.p99Ms.toFixed(2).padStart(6)} ms   first byte p50 ${t.firstByteP50Ms.toFixed(2).padStart(6)} ms  p99 ${t.firstByteP99Ms.toFixed(2).padStart(6)} ms`;
  for (const line of gatewayLines(f, row)) console.log(line);
}

/** The figures as lines (for the terminal and docs/BENCHMARKS.md). */
export function gatewayLines(f: GatewayFigures, row = (name: string, t: Timings) => `- ${name}: p50 ${t.p50Ms.toFixed(2)} ms, p99 ${t.p99Ms.toFixed(2)} ms; first byte p50 ${t.firstByteP50Ms.toFixed(2)} ms, p99 ${t.firstByteP99Ms.toFixed(2)} ms`): string[] {
  return [
    `\ngateway: ${f.calls} interleaved pairs of one streamed Anthropic call, direct vs through forwarder + gateway`,
    row('direct', f.direct),
    row('through gateway', f.gateway),
    `  added per call: p50 ${f.addedP50Ms.toFixed(2)} ms (target ≤ 2 ms), first byte p50 ${f.addedFirstByteP50Ms.toFixed(2)} ms`,
    `  gateway CPU per call: ${f.cpuMsPerCall.toFixed(3)} ms; metered exactly: ${f.meteredExactly}/${f.calls + 30}`,
  ];
}

/** The child: one gateway for the vendor at argv[3] on the socket argv[4], answering CPU and metering questions. */
async function child(): Promise<void> {
  const { openGateway } = await import('../src/gateway/index.js');
  const [, , , upstream, socketPath] = process.argv;
  let metered = 0;
  const gateway = await openGateway({
    socketPath: socketPath!,
    vendor: { api: 'anthropic-messages', upstream: upstream!, key: 'sk-bench' },
    onRecord: () => undefined,
    onModelCall: (call) => {
      const u = call.usage;
      if (u.input === 1200 && u.output === 80 && u.cacheRead === 300 && u.cacheWrite === 20) metered++;
    },
    limits: { burst: 100_000, perSecond: 100_000 },
  });
  process.on('message', (m) => {
    if (m === 'cpu') {
      const c = process.cpuUsage();
      process.send!({ cpuMicros: c.user + c.system });
    } else if (m === 'metered') process.send!({ metered });
  });
  process.on('disconnect', () => void gateway.close().then(() => process.exit(0)));
  process.send!({ ready: gateway.placeholder, socketPath: gateway.socketPath });
}

if (process.argv[2] === '--gateway-child' && process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) await child();
