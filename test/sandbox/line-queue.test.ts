/**
 * The stdout line queue every harness's output goes through. A harness controls how much it writes and when; the
 * reader may be busy (a permission wait, a stopped turn's drain), so a backlog must never cost more than its size.
 */
import { expect, it } from 'vitest';
import { LineQueue } from '../../src/sandbox/line-queue.js';

async function takeAll(queue: LineQueue): Promise<string[]> {
  const out: string[] = [];
  for await (const line of queue) out.push(line);
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
  const iterator = queue[Symbol.asyncIterator]();
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
