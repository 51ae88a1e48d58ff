/**
 * What a hostile harness's stdout costs one turn, through the stdio-JSON adapter and real processes: lines over their
 * cap are streamed past and reported once each, junk is sampled, a flood never keeps the event loop from its timers,
 * the pipe is paused while the turn is behind, and a harness that closes stdout but lives on ends its turn at once.
 */
import { driverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sampledLinesPerTurn } from '../../src/adapters/engine.js';
import { maxStdioJsonLineBytes, stdioJson } from '../../src/adapters/stdio-json-adapter.js';
import type { HarnessEvent } from '../../src/adapters/index.js';
import { LocalExecutor } from '../../src/sandbox/local-executor.js';

const workspace = mkdtempSync(path.join(tmpdir(), 'output-bounds-'));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));

const MiB = 1024 * 1024;
const complete = JSON.stringify({ type: 'complete', text: '{"step":"success","result":"done"}' });

/** A stdio-JSON harness as a `node -e` script: reads its request line, then runs `body` (with `write`, `done`). */
function harness(body: string): string[] {
  return [
    '-e',
    `
    const write = (text) => new Promise((resolve) => process.stdout.write(text, resolve));
    const done = ${JSON.stringify(`${complete}\n`)};
    process.stdin.once('data', async () => { ${body} });
    `,
  ];
}

function config(baseArgs: string[], extra: Partial<HarnessSessionConfig> = {}): HarnessSessionConfig {
  const executor = new LocalExecutor({ workspacePath: workspace, killGraceMs: 300 });
  return {
    runId: 'run-1', harnessName: 'hostile', executable: process.execPath, baseArgs, workspacePath: workspace,
    hostWorkspacePath: workspace, env: {}, executor, turnTimeoutMs: 60_000, ...extra,
  };
}

/** Runs one turn; returns its events (and the largest gap between 1 ms timer ticks while it ran). */
async function turn(baseArgs: string[], extra: Partial<HarnessSessionConfig> = {}) {
  const adapter = driverSession(stdioJson);
  await adapter.start(config(baseArgs, extra));
  let last = performance.now();
  let maxGapMs = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxGapMs = Math.max(maxGapMs, now - last);
    last = now;
  }, 1);
  const started = performance.now();
  const list: HarnessEvent[] = [];
  try {
    for await (const event of adapter.runTurn({ prompt: 'x', turn: 1 })) list.push(event);
  } finally {
    clearInterval(timer);
    await adapter.end();
  }
  return { list, maxGapMs, ms: performance.now() - started };
}

/** Pids of live processes whose command line contains `marker`. */
function processesWith(marker: string): number[] {
  return readdirSync('/proc').filter((d) => /^\d+$/.test(d)).filter((d) => {
    try {
      return readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(marker);
    } catch {
      return false;
    }
  }).map(Number);
}

const ofType = <T extends HarnessEvent['type']>(list: HarnessEvent[], type: T) => list.filter((e): e is Extract<HarnessEvent, { type: T }> => e.type === type);

describe('output bounds', () => {
  it('a 64 MB text line is streamed past: one line-too-large event with its size, then the turn completes', { timeout: 60_000 }, async () => {
    const { list } = await turn(harness(`
      await write('{"type":"text","text":"');
      const chunk = Buffer.alloc(1024 * 1024, 'x');
      for (let i = 0; i < 64; i++) await write(chunk);
      await write('"}\\n' + done);
    `));
    expect(ofType(list, 'line-too-large')).toEqual([{ type: 'line-too-large', bytes: 64 * MiB + 25, limit: maxStdioJsonLineBytes, opening: expect.stringMatching(/^\{"type":"text","text":"x+$/) }]);
    expect(list.at(-1)).toMatchObject({ type: 'turn-complete', text: '{"step":"success","result":"done"}' });
  });

  it('a 3 MB envelope is read whole (a terminal line may be twice the reply cap), a 9 MB one ends the turn saying why', { timeout: 60_000 }, async () => {
    const envelope = (mb: number) => harness(`
      await write('{"type":"complete","text":"' + 'y'.repeat(${mb} * 1024 * 1024) + '"}\\n');
    `);
    const ok = await turn(envelope(3), { maxReplyBytes: 4 * MiB });
    expect(ok.list.at(-1)).toMatchObject({ type: 'turn-complete' });
    expect((ok.list.at(-1) as { text: string }).text).toHaveLength(3 * MiB);
    const tooLarge = await turn(envelope(9), { maxReplyBytes: 4 * MiB });
    expect(ofType(tooLarge.list, 'line-too-large')).toMatchObject([{ bytes: 9 * MiB + 29, limit: 8 * MiB }]);
    expect(tooLarge.list.at(-1)).toMatchObject({ type: 'session-error', code: 'protocol-error', message: expect.stringContaining(`"complete" line of ${9 * MiB + 29} bytes, over the limit of ${8 * MiB} bytes`) });
  });

  it('a line over the cap without a newline at the end of output: the exit error says what was not read', { timeout: 60_000 }, async () => {
    const { list } = await turn(harness(`
      const chunk = Buffer.alloc(1024 * 1024, 'z');
      for (let i = 0; i < 16; i++) await write(chunk);
      process.exit(0);
    `));
    expect(ofType(list, 'line-too-large')).toMatchObject([{ bytes: 16 * MiB }]);
    expect(list.at(-1)).toMatchObject({ type: 'session-error', code: 'process-exit', message: expect.stringContaining(`it printed a line of ${16 * MiB} bytes, over the limit of ${maxStdioJsonLineBytes} bytes, which was not read`) });
  });

  it('100,000 junk lines: the first 20 are unknown events, the rest one count; the event loop keeps ticking', { timeout: 60_000 }, async () => {
    const { list, maxGapMs } = await turn(harness(`
      const junk = Array.from({ length: 1000 }, (_, i) => 'junk line ' + i).join('\\n') + '\\n';
      for (let i = 0; i < 100; i++) await write(junk);
      await write(done);
    `));
    expect(ofType(list, 'unknown')).toHaveLength(sampledLinesPerTurn);
    expect(ofType(list, 'output-sampled')).toEqual([{ type: 'output-sampled', unknownLines: 100_000, unknownReported: sampledLinesPerTurn, tooLargeLines: 0, tooLargeReported: 0 }]);
    expect(list.at(-1)).toMatchObject({ type: 'turn-complete' });
    expect(list.length).toBeLessThan(30);
    console.log(`100,000 junk lines: the largest gap between 1 ms timer ticks was ${Math.round(maxGapMs)} ms`);
    expect(maxGapMs).toBeLessThan(250);
  });

  it('cancelling a flooding turn takes effect at once: the stop wins over a backlog that never runs dry', { timeout: 60_000 }, async () => {
    const adapter = driverSession(stdioJson);
    await adapter.start(config(harness(`
      const junk = 'x\\n'.repeat(32 * 1024);
      for (;;) await write(junk);
    `)));
    const controller = new AbortController();
    const list: HarnessEvent[] = [];
    let cancelledAt = 0;
    for await (const event of adapter.runTurn({ prompt: 'x', turn: 1, signal: controller.signal })) {
      list.push(event);
      if (list.length === sampledLinesPerTurn) {
        cancelledAt = performance.now();
        controller.abort();
      }
    }
    const tookMs = performance.now() - cancelledAt;
    await adapter.end();
    expect(list.at(-1)).toMatchObject({ type: 'session-error', code: 'cancelled' });
    expect(ofType(list, 'output-sampled')).toHaveLength(1);
    // The kill grace (300 ms here) and the bounded drain of what it wrote (1 s), nothing more.
    expect(tookMs).toBeLessThan(3000);
  });

  it('a harness that closes stdout and lives on: the turn ends within seconds, as a protocol error, and the process is killed', { timeout: 60_000 }, async () => {
    const marker = `still-alive-${process.pid}-${Date.now()}`;
    const { list, ms } = await turn(harness(`
      const marker = ${JSON.stringify(marker)};
      require('node:fs').closeSync(1);
      setInterval(() => {}, 1000);
    `), { turnTimeoutMs: 600_000 });
    expect(list.at(-1)).toMatchObject({ type: 'session-error', code: 'protocol-error', message: expect.stringContaining('closed its stdout without finishing the turn and was still running 3000 ms later; it was killed') });
    expect(ms).toBeLessThan(10_000);
    expect(processesWith(marker)).toEqual([]);
  });

  it('a harness that prints its envelope, closes stdout and lives on: the turn completes, the process is killed', { timeout: 60_000 }, async () => {
    const { list, ms } = await turn(harness(`
      await write(done);
      require('node:fs').closeSync(1);
      setInterval(() => {}, 1000);
    `), { turnTimeoutMs: 600_000 });
    expect(list.at(-1)).toMatchObject({ type: 'turn-complete', text: '{"step":"success","result":"done"}' });
    expect(ms).toBeLessThan(10_000);
  });
});
