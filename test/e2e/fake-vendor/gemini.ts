/**
 * Gemini API (`generativelanguage.googleapis.com/v1beta`) for the fake vendor, as Gemini CLI calls it:
 * `POST /v1beta/models/<model>:streamGenerateContent?alt=sse` (SSE of GenerateContentResponse),
 * `:generateContent` (one JSON GenerateContentResponse) and `:countTokens`.
 *
 * Usage: the scripted `usage.input` is the NON-cached input; Gemini's `promptTokenCount` includes cached
 * tokens, so it is reported as `input + cacheRead` with `cachedContentTokenCount = cacheRead`.
 * Gemini has no cache-write count: `usage.cacheWrite` is not representable and is dropped. Thinking tokens
 * (`usage.reasoning`) go into `thoughtsTokenCount` and `totalTokenCount`, as the real API reports them.
 */
import type http from 'node:http';
import { servedUsage, sse, type ProtocolHandler, type RecordedRequest, type ScriptedReply } from './server.js';

/** Mount point for the fake vendor's `handlers`. */
export const geminiPrefix = '/v1beta/models';

/** The model named in a Gemini request path (`/v1beta/models/<model>:<method>`). */
export function geminiModelOf(request: RecordedRequest): string {
  const path = request.url.split('?')[0] ?? '';
  const tail = path.slice(geminiPrefix.length + 1);
  return decodeURIComponent(tail.split(':')[0] ?? 'gemini-fake');
}

/** The RPC a Gemini request calls: `streamGenerateContent`, `generateContent` or `countTokens`. */
export function geminiMethodOf(request: RecordedRequest): string {
  const path = request.url.split('?')[0] ?? '';
  return path.slice(path.lastIndexOf(':') + 1);
}

/** `match` for scripted replies: only the CLI's main streamed turn call consumes them. */
export function isGeminiTurnRequest(request: RecordedRequest): boolean {
  return geminiMethodOf(request) === 'streamGenerateContent';
}

/**
 * `fallback` for the side calls Gemini CLI makes besides the turn (token counting, routing/next-speaker
 * checks through `generateContent`): a harmless answer that consumes no scripted reply.
 */
export function geminiSideCallFallback(request: RecordedRequest): ScriptedReply | undefined {
  const method = geminiMethodOf(request);
  if (method === 'countTokens') return { text: '' };
  if (method === 'generateContent') return { text: '{}', usage: { input: 1, output: 1 } };
  return undefined;
}

/** Gemini reports thinking apart: `thoughtsTokenCount`, not in `candidatesTokenCount`, but in `totalTokenCount`. */
function usageMetadata(reply: ScriptedReply): Record<string, number> {
  const u = servedUsage(reply);
  const prompt = u.input + u.cacheRead;
  return {
    promptTokenCount: prompt,
    ...(u.cacheRead > 0 ? { cachedContentTokenCount: u.cacheRead } : {}),
    candidatesTokenCount: u.output,
    ...(u.reasoning > 0 ? { thoughtsTokenCount: u.reasoning } : {}),
    totalTokenCount: prompt + u.output + u.reasoning,
  };
}

function parts(reply: ScriptedReply): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  if (reply.text !== undefined && reply.text !== '') out.push({ text: reply.text });
  for (const call of reply.toolCalls ?? []) {
    out.push({ functionCall: { ...(call.id ? { id: call.id } : {}), name: call.name, args: call.input } });
  }
  if (out.length === 0) out.push({ text: '' });
  return out;
}

function responseChunk(model: string, content: Record<string, unknown>[] | undefined, reply: ScriptedReply, last: boolean): unknown {
  return {
    candidates: [
      {
        content: { role: 'model', parts: content ?? [] },
        ...(last ? { finishReason: 'STOP' } : {}),
        index: 0,
      },
    ],
    ...(last ? { usageMetadata: usageMetadata(reply) } : {}),
    modelVersion: model,
    responseId: `fake-${Date.now().toString(36)}`,
  };
}

function countTokens(request: RecordedRequest, res: http.ServerResponse): void {
  const size = request.rawBody.length;
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ totalTokens: Math.max(1, Math.ceil(size / 4)) }));
}

/** The Gemini protocol handler. */
export const gemini: ProtocolHandler = (request, reply, res) => {
  const method = geminiMethodOf(request);
  const model = geminiModelOf(request);
  if (method === 'countTokens') {
    countTokens(request, res);
    return;
  }
  const all = parts(reply);
  if (method === 'generateContent') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(responseChunk(model, all, reply, true)));
    return;
  }
  if (method !== 'streamGenerateContent') {
    res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 404, message: `fake gemini: no method ${method}`, status: 'NOT_FOUND' } }));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  // Text streams in two chunks (as the real API does); function calls and usage arrive in the last one.
  const text = all.filter((p) => 'text' in p);
  const calls = all.filter((p) => 'functionCall' in p);
  const firstText = typeof text[0]?.text === 'string' ? text[0].text : '';
  if (firstText.length > 1 && calls.length === 0) {
    const cut = Math.ceil(firstText.length / 2);
    sse(res, responseChunk(model, [{ text: firstText.slice(0, cut) }], reply, false));
    sse(res, responseChunk(model, [{ text: firstText.slice(cut) }], reply, true));
  } else {
    sse(res, responseChunk(model, all, reply, true));
  }
  res.end();
};
