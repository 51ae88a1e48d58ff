/**
 * Encrypted payloads end to end: a real run on the real dev server whose task, reply and result are not readable
 * in Temporal's stored history, yet the client reads them, and the codec server decodes them for the Web UI.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import proto from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AesGcmPayloadCodec, encryptingDataConverter, generateCodecToken, generatePayloadKey, payloadToJson, startCodecServer, type CodecServer, type JsonPayload } from '../../src/codec/index.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const keyId = 'test-2025';
const key = Buffer.from(generatePayloadKey(), 'base64');
const codec = new AesGcmPayloadCodec({ keys: new Map([[keyId, key]]), currentKeyId: keyId });

let plain: TestWorker;
let encrypted: TestWorker;
let codecServer: CodecServer;
const uiOrigin = 'http://127.0.0.1:8233';
const token = generateCodecToken();
const tokens = [{ name: 'operator', token, namespaces: ['default'] }];
const authorization = `Bearer ${token}`;

beforeAll(async () => {
  const catalog = scriptedCatalog(book);
  [plain, encrypted] = await Promise.all([startTestWorker({ catalog }), startTestWorker({ catalog, dataConverter: encryptingDataConverter(codec) })]);
  codecServer = await startCodecServer({ codec, tokens, allowEncode: true, corsOrigins: [uiOrigin] });
});
afterAll(async () => {
  await Promise.all([plain?.close(), encrypted?.close(), codecServer?.close()]);
});

/** The history exactly as the server stores it (no codec applied), serialised to bytes. */
async function storedHistory(client: Client, workflowId: string): Promise<{ bytes: Buffer; events: proto.temporal.api.history.v1.IHistoryEvent[] }> {
  const events: proto.temporal.api.history.v1.IHistoryEvent[] = [];
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await client.workflowService.getWorkflowExecutionHistory({ namespace: 'default', execution: { workflowId }, nextPageToken });
    events.push(...(page.history?.events ?? []));
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);
  return { bytes: Buffer.from(proto.temporal.api.history.v1.History.encode({ events }).finish()), events };
}

/** Runs a chat round trip: task → question → reply → result, each carrying its own marker. */
async function chatRun(w: TestWorker) {
  const id = randomUUID().slice(0, 8);
  const markers = { task: `TASKMARK-${id}`, reply: `REPLYMARK-${id}`, result: `RESULTMARK-${id}` };
  const task = book.write(`chat-${id}`, [{ envelope: { step: 'chat', message: 'Which branch?' } }, ok(`done: ${markers.result}`)], `deploy ${markers.task} now`);
  const workflowId = testWorkflowId('encrypted');
  const run = await w.start({ agent: 'scripted', task, workflowId });
  await expect.poll(async () => (await run.status()).state, { timeout: 20_000 }).toBe('waiting_for_reply');
  await run.reply(`use ${markers.reply}`);
  const result = await run.result();
  return { workflowId, markers, result };
}

describe('with payload keys', () => {
  it('task text, replies and results are not readable in the stored history, but the client reads them', async () => {
    const { workflowId, markers, result } = await chatRun(encrypted);
    expect(result.status).toBe('succeeded');
    expect(result.result).toContain(markers.result);
    expect((await encrypted.ledger.listPromptRuns(workflowId))[1]!.input).toContain(markers.reply);

    const { bytes, events } = await storedHistory(encrypted.client, workflowId);
    for (const marker of Object.values(markers)) expect(bytes.includes(marker), `${marker} is readable in history`).toBe(false);
    const started = events.find((e) => e.workflowExecutionStartedEventAttributes)!.workflowExecutionStartedEventAttributes!;
    const input = started.input!.payloads![0]!;
    expect(Buffer.from(input.metadata!.encoding!).toString()).toBe('binary/encrypted');
    expect(Buffer.from(input.metadata!['encryption-key-id']!).toString()).toBe(keyId);
    // The run's summary in the UI (user metadata) is encrypted too.
    expect(Buffer.from(events[0]!.userMetadata!.summary!.metadata!.encoding!).toString()).toBe('binary/encrypted');
  });

  it("a failed run's reason (the failure message, which can quote the task) is not readable either, yet result() has it", async () => {
    const failedRun = async (w: TestWorker) => {
      const marker = `FAILMARK-${randomUUID().slice(0, 8)}`;
      const task = book.write(`fail-${marker}`, [{ envelope: { step: 'failed', reason: `cannot do ${marker}` } }], 'try it');
      const workflowId = testWorkflowId('encrypted-failed');
      const result = await (await w.start({ agent: 'scripted', task, workflowId })).result();
      expect(result).toMatchObject({ status: 'failed', failureType: 'HarnessReportedFailure' });
      expect(result.reason).toContain(marker);
      const { bytes, events } = await storedHistory(w.client, workflowId);
      expect(events.some((e) => e.workflowExecutionFailedEventAttributes)).toBe(true);
      return bytes.includes(marker);
    };
    // Without keys the reason is plain in history (so the check below can see it when it is there).
    expect(await failedRun(plain)).toBe(true);
    expect(await failedRun(encrypted)).toBe(false);
  });

  it('the codec server decodes them with the key, for the Web UI (CORS) and the CLI (/{namespace}/decode)', async () => {
    const { workflowId, markers } = await chatRun(encrypted);
    const { events } = await storedHistory(encrypted.client, workflowId);
    const payloads: JsonPayload[] = [];
    for (const e of events) {
      const a = e.workflowExecutionStartedEventAttributes?.input ?? e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.args ?? e.workflowExecutionCompletedEventAttributes?.result;
      for (const p of a?.payloads ?? []) payloads.push(payloadToJson(p as never));
    }
    expect(payloads.length).toBeGreaterThanOrEqual(3);

    const preflight = await fetch(`${codecServer.url}/decode`, { method: 'OPTIONS', headers: { Origin: uiOrigin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace' } });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe(uiOrigin);
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/X-Namespace/i);

    for (const route of ['/decode', '/default/decode']) {
      const res = await fetch(`${codecServer.url}${route}`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default', Origin: uiOrigin, Authorization: authorization }, body: JSON.stringify({ payloads }) });
      expect(res.status).toBe(200);
      expect(res.headers.get('access-control-allow-origin')).toBe(uiOrigin);
      const decoded = (await res.json()) as { payloads: JsonPayload[] };
      const texts = decoded.payloads.map((p) => Buffer.from(p.data!, 'base64').toString('utf8'));
      for (const marker of Object.values(markers)) expect(texts.join('\n')).toContain(marker);
      expect(Buffer.from(decoded.payloads[0]!.metadata!.encoding!, 'base64').toString()).toBe('json/plain');
    }

    // An origin that is not the UI's is refused, preflight included; a server with another key refuses, naming the key id.
    const stranger = await fetch(`${codecServer.url}/decode`, { method: 'OPTIONS', headers: { Origin: 'http://evil.example' } });
    expect(stranger.status).toBe(403);
    expect(stranger.headers.get('access-control-allow-origin')).toBeNull();
    const otherKey = new AesGcmPayloadCodec({ keys: new Map([['other', Buffer.from(generatePayloadKey(), 'base64')]]), currentKeyId: 'other' });
    const wrong = await startCodecServer({ codec: otherKey, tokens });
    try {
      const res = await fetch(`${wrong.url}/default/decode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: authorization }, body: JSON.stringify({ payloads }) });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toMatch(new RegExp(`key id "${keyId}", which is not configured here`));
    } finally {
      await wrong.close();
    }
  });

  it('the codec server encodes too (the UI encodes signal/update input with it) and rejects bad bodies', async () => {
    const value = { text: 'from the UI' };
    const res = await fetch(`${codecServer.url}/default/encode`, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: authorization }, body: JSON.stringify({ payloads: [{ metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from(JSON.stringify(value)).toString('base64') }] }) });
    const { payloads } = (await res.json()) as { payloads: JsonPayload[] };
    expect(Buffer.from(payloads[0]!.metadata!.encoding!, 'base64').toString()).toBe('binary/encrypted');
    expect(Buffer.from(payloads[0]!.data!, 'base64').toString('latin1')).not.toContain('from the UI');
    const auth = { Authorization: authorization };
    expect((await fetch(`${codecServer.url}/default/decode`, { method: 'POST', headers: auth, body: 'nope' })).status).toBe(400);
    expect((await fetch(`${codecServer.url}/default/decode`, { method: 'GET', headers: auth })).status).toBe(405);
    expect((await fetch(`${codecServer.url}/elsewhere`, { method: 'POST', headers: auth, body: '{}' })).status).toBe(404);
  });
});

it('without keys the same history is readable (what the test above would catch)', async () => {
  const { workflowId, markers, result } = await chatRun(plain);
  expect(result.status).toBe('succeeded');
  const { bytes } = await storedHistory(plain.client, workflowId);
  for (const marker of Object.values(markers)) expect(bytes.includes(marker)).toBe(true);
});
