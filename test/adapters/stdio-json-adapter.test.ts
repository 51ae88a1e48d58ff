import { driverSession, type HarnessSessionConfig } from '../support/driver-session.js';
import { describe, expect, it } from 'vitest';
import { collectTurn, foldTurn } from '../../src/adapters/fold.js';
import { defaultAdapterRegistry, findDriver, UnknownDriverError } from '../../src/adapters/registry.js';
import { stdioJson } from '../../src/adapters/stdio-json-adapter.js';
import type { HarnessEvent } from '../../src/adapters/types.js';
import type { PermissionAnswer, PermissionGate, PermissionRequest } from '../../src/permissions/types.js';
import { FakeExecutor, line, type FakeRun } from './fake-executor.js';

function config(executor: FakeExecutor, extra: Partial<HarnessSessionConfig> = {}): HarnessSessionConfig {
  return {
    runId: 'run-1',
    harnessName: 'fake',
    executable: '/opt/fake-harness',
    baseArgs: ['--json'],
    model: 'fake-model-1',
    workspacePath: '/ws',
    hostWorkspacePath: '/ws',
    env: { FAKE_KEY: 'k' },
    executor,
    turnTimeoutMs: 5000,
    ...extra,
  };
}

async function started(runs: FakeRun[], extra: Partial<HarnessSessionConfig> = {}) {
  const executor = new FakeExecutor(runs);
  const adapter = driverSession(stdioJson);
  adapter.setSystemPrompt('Reply with an envelope.');
  adapter.applyPermissionPolicy('auto');
  await adapter.start(config(executor, extra));
  return { adapter, executor };
}

async function events(stream: AsyncIterable<HarnessEvent>): Promise<HarnessEvent[]> {
  const out: HarnessEvent[] = [];
  for await (const event of stream) out.push(event);
  return out;
}

const terminals = (list: HarnessEvent[]) => list.filter((e) => e.type === 'turn-complete' || e.type === 'session-error');
const envelope = '{"step":"success","result":"done"}';

describe('StdioJsonAdapter', () => {
  it('sends one request line and ends the turn with the envelope text', async () => {
    const { adapter, executor } = await started([{ lines: [line({ type: 'session', id: 's1' }), line({ type: 'complete', text: envelope })] }]);
    const list = await events(adapter.runTurn({ prompt: 'do it', turn: 1 }));
    expect(list.at(-1)).toMatchObject({ type: 'turn-complete', text: envelope });
    expect(terminals(list)).toHaveLength(1);
    const request = executor.requests[0]!;
    expect(request.argv).toEqual(['/opt/fake-harness', '--json']);
    expect(request.env).toMatchObject({ FAKE_KEY: 'k' });
    expect(request.keepStdinOpen).toBe(true);
    expect(request.stdin?.endsWith('\n')).toBe(true);
    expect(JSON.parse(request.stdin!)).toEqual({
      type: 'turn', prompt: 'do it', turn: 1, systemPrompt: 'Reply with an envelope.', sessionId: null,
      model: 'fake-model-1', workspace: '/ws', permissions: 'auto',
    });
  });

  it('turns an error line into a session-error with its code', async () => {
    const { adapter } = await started([{ lines: [line({ type: 'error', message: 'no such session', code: 'resume-failed' })], exitCode: 1 }]);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toEqual([{ type: 'session-error', code: 'resume-failed', message: 'no such session' }]);
  });

  it('maps an unknown error code to vendor-error and keeps the original code in the message', async () => {
    const { adapter } = await started([{ lines: [line({ type: 'error', message: 'rate limited', code: 'http-429' })] }]);
    const [event] = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(event).toMatchObject({ type: 'session-error', code: 'vendor-error' });
    expect(event?.type === 'session-error' && event.message).toContain('http-429');
  });

  it('turns garbage lines into unknown events and still completes', async () => {
    const garbage = ['not json at all', '[1,2,3]', line({ type: 'brand-new-event', x: 1 }), line({ type: 'text', text: 42 }), '{"type":'];
    const { adapter } = await started([{ lines: [...garbage, line({ type: 'complete', text: envelope })] }]);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list.filter((e) => e.type === 'unknown').map((e) => e.type === 'unknown' && e.raw)).toEqual(garbage);
    expect(list.at(-1)).toMatchObject({ type: 'turn-complete', text: envelope });
  });

  it('reports exactly one process-exit error, with exit code and stderr tail, when the process exits without a terminal line', async () => {
    const { adapter } = await started([{ lines: [line({ type: 'text', text: 'thinking' })], exitCode: 3, stderr: 'boom: out of memory\n' }]);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(terminals(list)).toHaveLength(1);
    const last = list.at(-1);
    expect(last).toMatchObject({ type: 'session-error', code: 'process-exit', exitCode: 3, stderrTail: 'boom: out of memory\n' });
    expect(last?.type === 'session-error' && last.message).toMatch(/exited with code 3.*out of memory/);
  });

  it('keeps only the first of two terminal lines, and nothing after it', async () => {
    const lines = [line({ type: 'complete', text: envelope }), line({ type: 'text', text: 'late' }), line({ type: 'error', message: 'second' })];
    const { adapter } = await started([{ lines }]);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toEqual([{ type: 'turn-complete', text: envelope }]);
  });

  it('a malformed complete line ends the turn with a protocol-error', async () => {
    const { adapter } = await started([{ lines: [line({ type: 'complete', text: { step: 'success' } })] }]);
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({ type: 'session-error', code: 'protocol-error' });
  });

  it('tracks session id, model and resume across turns and sends the session id back', async () => {
    const { adapter, executor } = await started([
      { lines: [line({ type: 'session', id: 'sess-9', model: 'm-large' }), line({ type: 'complete', text: envelope })] },
      { lines: [line({ type: 'session', id: 'sess-9' }), line({ type: 'complete', text: envelope, model: 'm-small', sessionId: 'sess-9' })] },
    ]);
    await events(adapter.runTurn({ prompt: 'one', turn: 1 }));
    expect(adapter.externalSessionId).toBe('sess-9');
    expect(adapter.reportedModel).toBe('m-large');
    expect(adapter.resumed).toBe(false);

    const second = await events(adapter.runTurn({ prompt: 'two', turn: 2 }));
    expect(JSON.parse(executor.requests[1]!.stdin!)).toMatchObject({ sessionId: 'sess-9', turn: 2 });
    // The harness did not say `resumed`, but it continued the session it was asked to: inferred true.
    expect(second[0]).toEqual({ type: 'session', sessionId: 'sess-9', resumed: true });
    expect(adapter.resumed).toBe(true);
    expect(adapter.reportedModel).toBe('m-small');
  });

  it('starts by resuming a configured session and reports resumed=false when the harness says so', async () => {
    const { adapter, executor } = await started(
      [{ lines: [line({ type: 'session', id: 'fresh', resumed: false }), line({ type: 'complete', text: envelope })] }],
      { resumeSessionId: 'old' },
    );
    await events(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(JSON.parse(executor.requests[0]!.stdin!)).toMatchObject({ sessionId: 'old' });
    expect(adapter.resumed).toBe(false);
    expect(adapter.externalSessionId).toBe('fresh');
  });

  it('folds incremental usage and cost', async () => {
    const { adapter } = await started([
      {
        lines: [
          line({ type: 'session', id: 's', resumed: true, model: 'm' }),
          line({ type: 'activity', description: 'read README.md' }),
          line({ type: 'usage', input: 100, output: 20, cacheRead: 50, costUsd: 0.01 }),
          line({ type: 'usage', input: 10, output: 5, cacheWrite: 7, costUsd: 0.002 }),
          line({ type: 'complete', text: envelope }),
        ],
      },
    ]);
    const result = await collectTurn(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(result.usage).toEqual({ input: 110, output: 25, cacheRead: 50, cacheWrite: 7 });
    expect(result.costUsd).toBeCloseTo(0.012);
    expect(result).toMatchObject({ text: envelope, sessionId: 's', resumed: true, model: 'm', activities: ['read README.md'], eventCount: 5 });
    expect(result.error).toBeUndefined();
  });

  it('a usage line with misnamed (or mistyped) fields is a protocol error, never zero tokens', async () => {
    for (const bad of [
      { type: 'usage', input_tokens: 100, output_tokens: 20 },
      { type: 'usage', input: 100, outputTokens: 20 },
      { type: 'usage', input: '100' },
    ]) {
      const { adapter } = await started([{ lines: [line(bad), line({ type: 'complete', text: envelope })] }]);
      const result = await collectTurn(adapter.runTurn({ prompt: 'x', turn: 1 }));
      expect(result.error).toMatchObject({ code: 'protocol-error', message: expect.stringContaining('malformed "usage" line') });
      expect(result.text).toBeUndefined();
      expect(result.usageEvents).toBe(0);
    }
    const { adapter } = await started([{ lines: [line({ type: 'usage', input_tokens: 5 })] }]);
    const result = await collectTurn(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(result.error?.message).toContain('unknown field(s) input_tokens');
  });

  it('a usage line whose counts cannot be true (NaN, 1e308, fractional, negative, a cost of 1e308) is refused as unknown usage, never summed', async () => {
    const lies = [
      '{"type":"usage","input":NaN,"output":5}',
      line({ type: 'usage', input: 1e308, output: 5 }),
      line({ type: 'usage', input: 10.5, output: 5 }),
      line({ type: 'usage', input: -1, output: 5 }),
      '{"type":"usage","input":1e999}',
      line({ type: 'usage', input: 10, output: 5, costUsd: 1e308 }),
    ];
    const { adapter } = await started([{ lines: [line({ type: 'usage', input: 7, output: 1 }), ...lies, line({ type: 'complete', text: envelope })] }]);
    const events: HarnessEvent[] = [];
    const result = await collectTurn(adapter.runTurn({ prompt: 'x', turn: 1 }), (e) => void events.push(e));
    // The turn goes on; only the one valid line is summed, each lie is a call of unknown usage, and says why.
    expect(result.error).toBeUndefined();
    expect(result.usage).toEqual({ input: 7, output: 1 });
    expect(result).toMatchObject({ usageEvents: 1 + lies.length, unknownUsageEvents: lies.length });
    const refusals = events.flatMap((e) => (e.type === 'activity' && e.description.startsWith('usage line refused') ? [e.description] : []));
    expect(refusals).toHaveLength(lies.length);
    expect(refusals[0]).toContain('not JSON');
    expect(refusals[1]).toMatch(/input: 1e\+308 \(a count must be a whole number from 0 to 1,000,000,000\)/);
    expect(refusals[5]).toMatch(/costUsd: 1e\+308/);
  });

  it('reasoning tokens are their own field; a usage line with no counts says "spent, unknown how many"', async () => {
    const { adapter } = await started([
      { lines: [line({ type: 'usage', input: 10, output: 2, reasoning: 30 }), line({ type: 'usage' }), line({ type: 'complete', text: envelope })] },
    ]);
    const result = await collectTurn(adapter.runTurn({ prompt: 'x', turn: 1 }));
    expect(result.usage).toEqual({ input: 10, output: 2, reasoning: 30 });
    expect(result).toMatchObject({ usageEvents: 2, unknownUsageEvents: 1 });
  });

  it('forks a resumed session only when declared able to (settings.forkSessions / capabilities.sessionFork)', async () => {
    const run = () => ({ lines: [line({ type: 'session', id: 's-new' }), line({ type: 'complete', text: envelope })] });
    const plain = await started([run()], { resumeSessionId: 's-old' });
    await collectTurn(plain.adapter.runTurn({ prompt: 'x', turn: 2 }));
    expect(JSON.parse(plain.executor.requests[0]!.stdin!)).not.toHaveProperty('fork');
    const forking = await started([run()], { resumeSessionId: 's-old', settings: { forkSessions: true } });
    const result = await collectTurn(forking.adapter.runTurn({ prompt: 'x', turn: 2 }));
    expect(JSON.parse(forking.executor.requests[0]!.stdin!)).toMatchObject({ sessionId: 's-old', fork: true });
    // A resumed or forked session holds the contract already: it is not sent again (a fresh session got it above).
    for (const { executor } of [plain, forking]) expect(JSON.parse(executor.requests[0]!.stdin!)).toMatchObject({ systemPrompt: null });
    // The branch's new id still counts as having continued the session.
    expect(result).toMatchObject({ sessionId: 's-new', resumed: true });
  });

  it('exactly-once usage: the request names the attempt; a call number is kept; a re-report of an earlier attempt is marked recovered; acks go to stdin', async () => {
    const { adapter, executor } = await started([
      {
        lines: [
          line({ type: 'usage', input: 5, output: 1, attempt: 'old:1:1:1', turn: 1, call: 2 }),
          line({ type: 'usage', input: 10, output: 2, call: 1 }),
        ],
        hang: true,
      },
    ]);
    const iterator = adapter.runTurn({ prompt: 'x', turn: 2, attemptId: 'new:2:2:1' })[Symbol.asyncIterator]();
    expect((await iterator.next()).value).toEqual({ type: 'usage', usage: { input: 5, output: 1 }, recovered: { attemptId: 'old:1:1:1', turn: 1, call: 2 } });
    expect(JSON.parse(executor.requests[0]!.stdin!)).toMatchObject({ attempt: 'new:2:2:1' });
    expect((await iterator.next()).value).toEqual({ type: 'usage', usage: { input: 10, output: 2 }, call: 1 });
    await adapter.acknowledgeUsage({ attemptId: 'new:2:2:1', call: 1 });
    expect(executor.processes[0]!.written).toEqual([`${JSON.stringify({ type: 'usage-ack', attempt: 'new:2:2:1', call: 1 })}\n`]);
    await adapter.end();
    // A re-report without its turn and call cannot be booked: a protocol error.
    const bad = await started([{ lines: [line({ type: 'usage', input: 5, attempt: 'old:1:1:1' })] }]);
    const result = await collectTurn(bad.adapter.runTurn({ prompt: 'x', turn: 2, attemptId: 'new' }));
    expect(result.error).toMatchObject({ code: 'protocol-error', message: expect.stringContaining('needs its attempt, turn and call') });
  });

  it('writes the gate\'s permission answers to the running process stdin', async () => {
    const { adapter, executor } = await started([{ lines: [line({ type: 'permission', id: 'p1', tool: 'bash', input: { cmd: 'ls' } })], hang: true }]);
    const abort = new AbortController();
    const gate = { interactive: false, decide: async () => ({ decision: 'deny' as const, scope: 'once' as const, decidedBy: 'test', message: 'not now' }) };
    const iterator = adapter.runTurn({ prompt: 'x', turn: 1, gate, signal: abort.signal })[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.value).toEqual({
      type: 'permission-request', id: 'p1', tool: 'bash', kind: 'command', input: { cmd: 'ls' }, title: 'ls', command: 'ls',
      options: { edit: 'emulated', denyMessage: true },
    });
    expect((await iterator.next()).value).toMatchObject({ type: 'permission-decision', id: 'p1', decision: 'deny', message: 'not now' });
    expect(executor.processes[0]!.written.at(-1)).toEqual(`${JSON.stringify({ type: 'permission-response', id: 'p1', allow: false, message: 'not now' })}\n`);
    abort.abort();
    const rest = await iterator.next();
    expect(rest.value).toMatchObject({ type: 'session-error', code: 'cancelled' });
    expect((await iterator.next()).done).toBe(true);
  });
});

describe('StdioJsonAdapter with a permission gate', () => {
  const gate = (answer: Omit<PermissionAnswer, 'scope'>, delayMs = 0): PermissionGate & { asked: PermissionRequest[] } => {
    const asked: PermissionRequest[] = [];
    return {
      interactive: true,
      asked,
      decide: async (request, signal) => {
        asked.push(request);
        await new Promise((resolve, reject) => {
          const timer = setTimeout(resolve, delayMs);
          signal?.addEventListener('abort', () => (clearTimeout(timer), reject(new Error('aborted'))), { once: true });
        });
        return { scope: 'once', ...answer };
      },
    };
  };
  const asking = (extra: Record<string, unknown> = {}) => [
    { lines: [line({ type: 'session', id: 's' }), line({ type: 'permission', id: 'p1', tool: 'bash', input: { command: 'touch a' }, ...extra })], hang: true },
  ];

  it('an editable harness gets the edited input in its answer', async () => {
    const { adapter, executor } = await started(asking({ editable: true }));
    const g = gate({ decision: 'allow', editedInput: { command: 'touch b' }, decidedBy: 'operator:x' });
    const it = adapter.runTurn({ prompt: 'x', turn: 1, gate: g })[Symbol.asyncIterator]();
    const seen: HarnessEvent[] = [];
    while (seen.at(-1)?.type !== 'permission-decision') seen.push((await it.next()).value as HarnessEvent);
    expect(g.asked[0]).toMatchObject({ tool: 'bash', kind: 'command', command: 'touch a', options: { edit: 'native' } });
    expect(seen.at(-1)).toMatchObject({ type: 'permission-decision', decision: 'allow', edited: true, decidedBy: 'operator:x' });
    expect(executor.processes[0]!.written).toEqual([`${JSON.stringify({ type: 'permission-response', id: 'p1', allow: true, input: { command: 'touch b' } })}\n`]);
    await adapter.end();
  });

  it('a harness that cannot take edits is refused, with the edit in the message (it may ask again with it)', async () => {
    const { adapter, executor } = await started(asking());
    const it = adapter.runTurn({ prompt: 'x', turn: 1, gate: gate({ decision: 'allow', editedInput: { command: 'touch b' }, decidedBy: 'operator:x' }) })[Symbol.asyncIterator]();
    while (((await it.next()).value as HarnessEvent).type !== 'permission-decision');
    const answer = JSON.parse(executor.processes[0]!.written[0]!) as { allow: boolean; message: string };
    expect(answer.allow).toBe(false);
    expect(answer.message).toContain('{"command":"touch b"}');
    await adapter.end();
  });

  it('the turn timeout does not run while a decision is awaited', async () => {
    const { adapter, executor } = await started(
      // The process stays alive (like a harness waiting for its answer) for much longer than the turn timeout.
      [{ lines: [line({ type: 'permission', id: 'p1', tool: 'bash', input: { command: 'ls' } }), line({ type: 'complete', text: envelope })], hang: true }],
      { turnTimeoutMs: 200 },
    );
    const list = await events(adapter.runTurn({ prompt: 'x', turn: 1, gate: gate({ decision: 'allow', decidedBy: 'operator:x' }, 600) }));
    expect(list.at(-1)).toMatchObject({ type: 'turn-complete', text: envelope });
    expect(executor.processes[0]!.written).toHaveLength(1);
  });

  it('cancelling during the wait ends the turn as cancelled and answers nothing', async () => {
    const { adapter, executor } = await started(asking());
    const controller = new AbortController();
    const done = events(adapter.runTurn({ prompt: 'x', turn: 1, signal: controller.signal, gate: gate({ decision: 'allow', decidedBy: 'operator:x' }, 60_000) }));
    await new Promise((r) => setTimeout(r, 50));
    controller.abort();
    const list = await done;
    expect(list.at(-1)).toMatchObject({ type: 'session-error', code: 'cancelled' });
    expect(executor.processes[0]!.written).toEqual([]);
  });
});

describe('foldTurn', () => {
  it('has unknown usage (not zero) and no cost for a turn that reported none', () => {
    const result = foldTurn([{ type: 'session-error', code: 'timeout', message: 'slow' }]);
    expect(result).toMatchObject({ usage: {}, usageEvents: 0, unknownUsageEvents: 0, resumed: false, eventCount: 1 });
    expect(result.usage.input).toBeUndefined();
    expect(result.costUsd).toBeUndefined();
    expect(result.error).toEqual({ code: 'timeout', message: 'slow' });
  });

  it('keeps only the last five activities', () => {
    const acts: HarnessEvent[] = Array.from({ length: 12 }, (_, i) => ({ type: 'activity', description: `a${i}` }));
    expect(foldTurn(acts).activities).toEqual(['a7', 'a8', 'a9', 'a10', 'a11']);
  });
});

describe('AdapterRegistry', () => {
  it('creates StdioJson adapters and names the registered classes for an unknown one', () => {
    const registry = defaultAdapterRegistry();
    expect(registry.has('StdioJson')).toBe(true);
    expect(findDriver(registry, 'StdioJson').driverClass).toBe('StdioJson');
    expect([...registry.keys()].sort()).toEqual(['ClaudeCode', 'Codex', 'GeminiCli', 'OpenCode', 'Pi', 'StdioJson']);
    expect(() => findDriver(registry, 'MartianCli')).toThrow(UnknownDriverError);
    expect(() => findDriver(registry, 'MartianCli')).toThrow(/"MartianCli".*Registered: ClaudeCode, Codex, GeminiCli, OpenCode, Pi, StdioJson.*driverClass/);
  });
});
