/**
 * The stdout line queue every harness's output goes through. A harness controls how much it writes and when; the
 * reader may be busy (a permission wait, a stopped turn's drain), so a backlog must never cost more than its size.
 */
import { describe, expect, it } from 'vitest';
import { LineQueue, OversizedLine, defaultLineLimits, oversizedOpeningBytes, type OutputLine } from '../../src/sandbox/line-queue.js';

async function takeAll(queue: LineQueue): Promise<string[]> {
  const out: string[] = [];
  for await (const line of queue.text()) out.push(line);
  return out;
}

it('a burst of 200,000 lines written before the reader takes any is handed out in order, in linear time', async () => {
  const queue = new LineQueue();
  const lines = Array.from({ length: 200_000 }, (_, i) => `{"type":"usage","input":${i}}`);
  queue.push(`${lines.join('\n')}\n`);
  queue.end();
  const started = performance.now();
  const taken = await takeAll(queue);
  const ms = performance.now() - started;
  expect(taken).toEqual(lines);
  // Taking lines with Array.shift was quadratic: 17 s of the worker's main thread for this burst (21 ms now).
  expect(ms).toBeLessThan(2000);
});

it('lines pushed while a backlog is being taken keep their order across the queue compacting itself', async () => {
  const queue = new LineQueue();
  const iterator = queue.text()[Symbol.asyncIterator]();
  const taken: string[] = [];
  let written = 0;
  const write = (n: number) => {
    queue.push(Array.from({ length: n }, () => `${written++}\n`).join(''));
  };
  write(5000);
  for (let round = 0; round < 20; round++) {
    for (let k = 0; k < 1000; k++) taken.push((await iterator.next()).value as string);
    write(800);
  }
  queue.end();
  for (let r = await iterator.next(); !r.done; r = await iterator.next()) taken.push(r.value);
  expect(taken).toEqual(Array.from({ length: written }, (_, i) => String(i)));
});

const MiB = 1024 * 1024;

/** Pushes `bytes` bytes of `fill` in 64 KiB chunks (as a pipe delivers them), reusing one buffer: nothing is materialised. */
function pushBytes(queue: LineQueue, bytes: number, fill = 'x'): void {
  const chunk = Buffer.alloc(64 * 1024, fill);
  for (let left = bytes; left > 0; left -= chunk.length) queue.push(left >= chunk.length ? chunk : chunk.subarray(0, left));
}

async function takeEntries(queue: LineQueue): Promise<OutputLine[]> {
  const out: OutputLine[] = [];
  for await (const line of queue) out.push(line);
  return out;
}

describe('line caps', () => {
  it('a 600 MB line is streamed past, never assembled: one OversizedLine with its byte count and opening, then the next line', async () => {
    const queue = new LineQueue({ limits: { maxLineBytes: MiB, maxLongLineBytes: 8 * MiB } });
    const before = process.memoryUsage().rss;
    queue.push('{"type":"text","text":"');
    pushBytes(queue, 600 * MiB);
    queue.push('"}\nafter\n');
    queue.end();
    const grown = process.memoryUsage().rss - before;
    const [big, after, ...rest] = await takeEntries(queue);
    expect(big).toBeInstanceOf(OversizedLine);
    const oversized = big as OversizedLine;
    expect(oversized.bytes).toBe(600 * MiB + '{"type":"text","text":"'.length + 2);
    expect(oversized.limit).toBe(8 * MiB);
    expect(oversized.opening.startsWith('{"type":"text","text":"xxx')).toBe(true);
    expect(oversized.opening.length).toBe(oversizedOpeningBytes);
    expect([after, ...rest]).toEqual(['after']);
    expect(grown).toBeLessThan(100 * MiB);
  });

  it('an over-cap line without a newline at the end of output is reported the same way', async () => {
    const queue = new LineQueue();
    queue.push('ok\n');
    pushBytes(queue, 20 * MiB);
    queue.end();
    const [first, second, ...rest] = await takeEntries(queue);
    expect(first).toBe('ok');
    expect(second).toMatchObject({ bytes: 20 * MiB, limit: defaultLineLimits.maxLongLineBytes });
    expect(rest).toEqual([]);
  });

  it('a line past maxLineBytes grows to maxLongLineBytes only when its opening is allowed to', async () => {
    const limits = { maxLineBytes: 1000, maxLongLineBytes: 5000, allowsLongLine: (opening: string) => opening.startsWith('{"type":"complete"') };
    const queue = new LineQueue({ limits });
    const text = 'y'.repeat(3000);
    queue.push(`{"type":"text","text":"${text}"}\n`);
    queue.push(`{"type":"complete","text":"${text}"}\n`);
    queue.push(`{"type":"complete","text":"${text}${text}"}\n`);
    queue.end();
    const [text1, complete, tooLong, ...rest] = await takeEntries(queue);
    expect(text1).toMatchObject({ limit: 1000, bytes: 3000 + 25 });
    expect(complete).toBe(`{"type":"complete","text":"${text}"}`);
    expect(tooLong).toMatchObject({ limit: 5000, bytes: 6000 + 29 });
    expect(rest).toEqual([]);
  });

  it('the text view skips oversized lines; multi-byte characters split across chunks are decoded whole', async () => {
    const queue = new LineQueue({ limits: { maxLineBytes: 10, maxLongLineBytes: 10 } });
    const euro = Buffer.from('€\n');
    queue.push(euro.subarray(0, 1));
    queue.push(euro.subarray(1));
    queue.push('way more than ten bytes\r\nshort\r\n');
    queue.end();
    const out: string[] = [];
    for await (const line of queue.text()) out.push(line);
    expect(out).toEqual(['€', 'short']);
  });
});

describe('backpressure', () => {
  it('pauses its producer past the high-water mark and resumes it once the reader took half', async () => {
    const flow: string[] = [];
    const queue = new LineQueue({ highWaterLines: 100, highWaterBytes: MiB, onPause: () => flow.push('pause'), onResume: () => flow.push('resume') });
    queue.push(Array.from({ length: 101 }, (_, i) => `${i}\n`).join(''));
    expect(flow).toEqual(['pause']);
    expect(queue.isPaused).toBe(true);
    const it = queue[Symbol.asyncIterator]();
    for (let i = 0; i < 50; i++) await it.next();
    expect(flow).toEqual(['pause']);
    await it.next();
    expect(flow).toEqual(['pause', 'resume']);
    expect(queue.backlog).toBe(50);
  });

  it('counts bytes too: a few large lines pause it, and the end resumes it', () => {
    const flow: string[] = [];
    const queue = new LineQueue({ highWaterBytes: 1000, onPause: () => flow.push('pause'), onResume: () => flow.push('resume') });
    queue.push(`${'z'.repeat(600)}\n${'z'.repeat(600)}\n`);
    expect(flow).toEqual(['pause']);
    queue.end();
    expect(flow).toEqual(['pause', 'resume']);
  });
});
