#!/usr/bin/env node
// A stdio-JSON harness (see docs/stdio-json.md in durable-harness): it reports what it is doing every 200 ms for
// PONDER_SECONDS (default 60), then succeeds. Long enough for the service to cancel it mid-turn.
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';

const out = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const rl = createInterface({ input: process.stdin });
const request = JSON.parse((await rl[Symbol.asyncIterator]().next()).value);
out({ type: 'session', id: request.sessionId ?? randomUUID(), resumed: false, model: 'ponder-1' });
const seconds = Number(process.env.PONDER_SECONDS ?? 60);
for (let i = 1; i <= seconds * 5; i += 1) {
  out({ type: 'activity', description: `pondering (${i})` });
  await new Promise((resolve) => setTimeout(resolve, 200));
}
out({ type: 'usage', input: Math.ceil(request.prompt.length / 4), output: 20 });
const envelope = { step: 'success', result: 'pondered it' };
process.stdout.write(`${JSON.stringify({ type: 'complete', text: JSON.stringify(envelope) })}\n`, () => process.exit(0));
