/**
 * The local sandbox's forwarder (native/dh-contain.c `--forward`): from a process inside the turn's network namespace,
 * 127.0.0.1:<gatewayPort> is piped byte for byte to the run's gateway socket on the host. What a harness could do to
 * it: send megabytes both ways, half-close and wait for the answer, hold hundreds of connections, or call before the
 * gateway listens. Needs a root worker (this machine's), as the gateway policies do.
 */
import { createHash } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { gatewayPort } from '../../src/sandbox/forwarder.js';
import { LocalSandboxProvider } from '../../src/sandbox/local-provider.js';
import type { SandboxRef } from '../../src/sandbox/types.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'dh-fwd-'));
chmodSync(root, 0o711);
const provider = new LocalSandboxProvider({ root: path.join(root, 'workspaces') });
afterAll(() => rmSync(root, { recursive: true, force: true }));

const start = (workflowId: string) =>
  provider.start({ workflowId, runId: 'r1', agent: 'a', identity: { tenantId: 't', userId: 'u' }, spec: { provider: 'local', workspaceScope: 'run', networkPolicy: 'vendor', options: { user: '64072:64072' } } });

/** Deterministic bytes: what each side sends, so the other can check them by hash. */
const payload = `const payload = (n, seed) => { const b = Buffer.alloc(n); let x = seed; for (let i = 0; i < n; i++) { x = (x * 1103515245 + 12345) >>> 0; b[i] = x >>> 24; } return b; };`;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const bytes = new Function(`${payload} return payload;`)() as (n: number, seed: number) => Buffer;

/** Runs `script` (Node, inside the sandbox as its user) and returns its last stdout line parsed. */
async function inside(ref: SandboxRef, script: string): Promise<Record<string, unknown>> {
  const handle = await provider.attach(ref);
  try {
    const proc = handle.executor.exec({ argv: [process.execPath, '-e', `const net = require('net'), crypto = require('crypto'); const port = ${gatewayPort}; ${payload}\n${script}`] });
    const lines: string[] = [];
    for await (const line of proc.lines) lines.push(line);
    const exit = await proc.exit;
    expect(exit.code, proc.stderrTail()).toBe(0);
    return JSON.parse(lines.at(-1)!) as Record<string, unknown>;
  } finally {
    await handle.release();
  }
}

/** The gateway's side: `E` echoes the hash of what it read once the client half-closes, then 4 MiB; `H` holds. */
function gatewayOn(socket: string): { server: net.Server; held: net.Socket[]; most: () => number } {
  const held: net.Socket[] = [];
  let open = 0;
  let most = 0;
  const server = net.createServer((c) => {
    open += 1;
    most = Math.max(most, open);
    c.on('close', () => (open -= 1));
    const hash = createHash('sha256');
    let mode = '';
    c.on('data', (d: Buffer) => {
      if (!mode) mode = String.fromCharCode(d[0]!);
      if (mode === 'H') held.push(c);
      else hash.update(d);
    });
    c.on('end', () => {
      if (mode !== 'E') return c.end();
      c.write(`${hash.digest('hex')}\n`);
      c.end(bytes(4 << 20, 7));
    });
  });
  server.listen(socket);
  return { server, held, most: () => most };
}

describe('the local sandbox forwarder (policy vendor)', () => {
  it('pipes 8 MiB out and 4 MiB back exactly, across a half-close, on 20 connections at once', { timeout: 60_000 }, async () => {
    const ref = await start('wf-fwd-bytes');
    const gw = gatewayOn(ref.gateway!.socket);
    await new Promise((r) => gw.server.once('listening', r));
    try {
      const result = await inside(
        ref,
        `const one = (i) => new Promise((resolve) => {
           const s = net.connect(port, '127.0.0.1');
           const out = Buffer.concat([Buffer.from('E'), payload(8 << 20, i + 1)]);
           const got = [];
           s.on('data', (d) => got.push(d));
           s.on('error', (e) => resolve({ error: e.code }));
           s.on('close', () => { const all = Buffer.concat(got); const nl = all.indexOf(10);
             resolve({ echoed: all.subarray(0, nl).toString(), expected: crypto.createHash('sha256').update(out).digest('hex'),
                       back: crypto.createHash('sha256').update(all.subarray(nl + 1)).digest('hex') }); });
           s.end(out);
         });
         Promise.all(Array.from({ length: 20 }, (_, i) => one(i))).then((r) => console.log(JSON.stringify({ r })));`,
      );
      const rows = result.r as { echoed: string; expected: string; back: string }[];
      expect(rows).toHaveLength(20);
      for (const row of rows) {
        expect(row.echoed).toBe(row.expected);
        expect(row.back).toBe(sha(bytes(4 << 20, 7)));
      }
    } finally {
      gw.server.close();
    }
  });

  it('holds at most 256 connections at once, closes the rest, and serves again once they are gone', { timeout: 60_000 }, async () => {
    const ref = await start('wf-fwd-cap');
    const gw = gatewayOn(ref.gateway!.socket);
    await new Promise((r) => gw.server.once('listening', r));
    try {
      const result = await inside(
        ref,
        `const sockets = [];
         let closed = 0;
         for (let i = 0; i < 300; i++) { const s = net.connect(port, '127.0.0.1'); s.on('error', () => {}); s.on('close', () => closed++); s.write('H'); sockets.push(s); }
         setTimeout(() => {
           const closedWhileHeld = closed;
           for (const s of sockets) s.destroy();
           setTimeout(() => {
             const s = net.connect(port, '127.0.0.1');
             const got = [];
             s.on('data', (d) => got.push(d)); s.on('error', (e) => console.log(JSON.stringify({ error: e.code })));
             s.on('close', () => console.log(JSON.stringify({ closedWhileHeld, after: Buffer.concat(got).length })));
             s.end('E');
           }, 500);
         }, 2000);`,
      );
      expect(gw.most()).toBe(256);
      expect(result.closedWhileHeld).toBe(44);
      expect(result.after).toBe(65 + (4 << 20));
    } finally {
      for (const c of gw.held) c.destroy();
      gw.server.close();
    }
  });

  it('a call before the gateway listens closes that connection only; the next one goes through', { timeout: 60_000 }, async () => {
    const ref = await start('wf-fwd-late');
    let gw: ReturnType<typeof gatewayOn> | undefined;
    const late = setTimeout(() => (gw = gatewayOn(ref.gateway!.socket)), 1500);
    try {
      const result = await inside(
        ref,
        `const call = () => new Promise((resolve) => { const s = net.connect(port, '127.0.0.1'); let n = 0;
           s.on('data', (d) => (n += d.length)); s.on('error', (e) => resolve(e.code)); s.on('close', () => resolve(n)); s.end('E'); });
         (async () => { const first = await call(); let later = 0, tries = 0;
           while (!(later > 0) && tries++ < 100) { await new Promise((r) => setTimeout(r, 100)); later = await call(); }
           console.log(JSON.stringify({ first, later })); })();`,
      );
      // Closed, or reset: the request it had sent was never read.
      expect([0, 'ECONNRESET']).toContain(result.first);
      expect(result.later).toBe(65 + (4 << 20));
    } finally {
      clearTimeout(late);
      gw?.server.close();
    }
  });
});
