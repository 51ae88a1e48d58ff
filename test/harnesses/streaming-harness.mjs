#!/usr/bin/env node
// A stdio-JSON harness that streams a turn slowly, for tests of live run events (test/cli/logs.test.ts):
//
//   node streaming-harness.mjs
//
// The prompt selects what it prints (words anywhere in it):
//   delay:MS      sleeps MS after the session line (a follower has time to attach)
//   stream:N:MS   N activity lines "tick I printed-at EPOCH_MS" (EPOCH_MS: Date.now() as the line is written),
//                 MS apart, each followed by a usage line {input: 10, output: 1}
//   tool          an activity line naming a tool use: `Bash {"command":"ls -la /tmp"}`
//   hostile       an activity line with terminal escapes (ESC[2J, a bidi override, a newline) and one of
//                 1,000,000 bytes ('h'), just under the protocol's 1 MiB line limit
//   ask           asks permission for `Bash {"command":"echo asked"}` (id p1), waits for the answer and prints an
//                 activity line "permission p1: allowed" (or "denied")
//   fail          the envelope says the run failed ("gave up on purpose") instead of succeeding
// Then one `complete` line with the envelope, and exit.
import { createInterface } from 'node:readline';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const write = (obj) =>
  new Promise((resolve) => {
    if (process.stdout.write(`${JSON.stringify(obj)}\n`)) resolve();
    else process.stdout.once('drain', resolve);
  });

const lines = createInterface({ input: process.stdin });
const first = await new Promise((resolve) => lines.once('line', resolve));
const request = JSON.parse(first);
// Stop when the runtime that started this process is gone.
process.stdin.on('close', () => process.exit(0));
const prompt = String(request.prompt);

await write({ type: 'session', id: request.sessionId ?? `stream-${process.pid}`, model: 'streaming-1' });
const delay = /delay:(\d+)/.exec(prompt);
if (delay) await sleep(Number(delay[1]));
if (/\btool\b/.test(prompt)) await write({ type: 'activity', description: 'Bash {"command":"ls -la /tmp"}' });
if (/\bhostile\b/.test(prompt)) {
  await write({ type: 'activity', description: 'evil \u001b[2J\u001b[31mred\u202eesrever\nforged line' });
  await write({ type: 'activity', description: 'h'.repeat(1_000_000) });
}
if (/\bask\b/.test(prompt)) {
  const answer = new Promise((resolve) =>
    lines.on('line', (line) => {
      const message = JSON.parse(line);
      if (message.type === 'permission-response' && message.id === 'p1') resolve(message);
    }),
  );
  await write({ type: 'permission', id: 'p1', tool: 'Bash', input: { command: 'echo asked' } });
  await write({ type: 'activity', description: `permission p1: ${(await answer).allow ? 'allowed' : 'denied'}` });
}
const stream = /stream:(\d+):(\d+)/.exec(prompt);
if (stream) {
  const [count, everyMs] = [Number(stream[1]), Number(stream[2])];
  for (let i = 1; i <= count; i++) {
    await write({ type: 'activity', description: `tick ${i} printed-at ${Date.now()}` });
    await write({ type: 'usage', input: 10, output: 1 });
    if (i < count) await sleep(everyMs);
  }
}
const envelope = /\bfail\b/.test(prompt) ? { step: 'failed', reason: 'gave up on purpose' } : { step: 'success', result: 'streamed' };
await write({ type: 'complete', text: JSON.stringify(envelope) });
process.exit(0);
