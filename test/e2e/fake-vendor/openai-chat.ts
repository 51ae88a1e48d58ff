/**
 * OpenAI-compatible Chat Completions (`POST /v1/chat/completions`) for the fake vendor, as OpenCode
 * (`@ai-sdk/openai-compatible`) and Pi (`api: "openai-completions"`) call it. Streams
 * `chat.completion.chunk` SSE events (text deltas, tool-call deltas, a finish reason, then a usage chunk when
 * `stream_options.include_usage` is set) ending with `data: [DONE]`; answers a `chat.completion` object when
 * the request does not stream.
 *
 * Usage: the scripted `usage.input` is the NON-cached input; OpenAI's `prompt_tokens` includes cached tokens,
 * so it is reported as `input + cacheRead` with `prompt_tokens_details.cached_tokens = cacheRead`.
 * Chat Completions has no cache-write count: `usage.cacheWrite` is not representable and is dropped.
 */
import type http from 'node:http';
import { servedUsage, sse, type ProtocolHandler, type RecordedRequest, type ScriptedReply } from './server.js';

/** Mount point for the fake vendor's `handlers`. */
export const openaiChatPrefix = '/v1/chat/completions';

interface ChatBody {
  readonly model?: string;
  readonly stream?: boolean;
  readonly stream_options?: { readonly include_usage?: boolean };
  readonly tools?: readonly unknown[];
  readonly messages?: readonly { readonly role?: string; readonly content?: unknown }[];
}

function bodyOf(request: RecordedRequest): ChatBody {
  return typeof request.body === 'object' && request.body !== null ? (request.body as ChatBody) : {};
}

/**
 * `match` for scripted replies: only requests that offer tools are agent turns. OpenCode's per-turn title
 * generation is a tool-less call; it should be answered by `openaiChatTitleFallback` instead.
 */
export function isChatTurnRequest(request: RecordedRequest): boolean {
  const tools = bodyOf(request).tools;
  return Array.isArray(tools) && tools.length > 0;
}

/** `fallback` for tool-less side calls (OpenCode's session title): a short title, without consuming the script. */
export function openaiChatTitleFallback(request: RecordedRequest): ScriptedReply | undefined {
  if (isChatTurnRequest(request)) return undefined;
  return { text: 'Fake session title', usage: { input: 3, output: 2 } };
}

/** `completion_tokens` includes the reasoning tokens, reported again in `completion_tokens_details`. */
function usageOf(reply: ScriptedReply): Record<string, unknown> {
  const u = servedUsage(reply);
  return {
    prompt_tokens: u.input + u.cacheRead,
    completion_tokens: u.output + u.reasoning,
    total_tokens: u.input + u.cacheRead + u.output + u.reasoning,
    prompt_tokens_details: { cached_tokens: u.cacheRead },
    completion_tokens_details: { reasoning_tokens: u.reasoning },
  };
}

function toolCallsOf(reply: ScriptedReply): { id: string; name: string; arguments: string }[] {
  return (reply.toolCalls ?? []).map((call, i) => ({
    id: call.id ?? `call_fake_${i}_${Math.random().toString(36).slice(2, 8)}`,
    name: call.name,
    arguments: JSON.stringify(call.input),
  }));
}

function respondWhole(res: http.ServerResponse, id: string, model: string, reply: ScriptedReply): void {
  const calls = toolCallsOf(reply);
  res.writeHead(200, { 'content-type': 'application/json' }).end(
    JSON.stringify({
      id,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model,
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: reply.text ?? null,
            ...(calls.length
              ? { tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) }
              : {}),
          },
          finish_reason: calls.length ? 'tool_calls' : 'stop',
        },
      ],
      usage: usageOf(reply),
    }),
  );
}

/** The OpenAI Chat Completions protocol handler. */
export const openaiChat: ProtocolHandler = (request, reply, res) => {
  const body = bodyOf(request);
  const model = body.model ?? 'fake-model';
  const id = `chatcmpl-fake${Date.now().toString(36)}`;
  if (!body.stream) {
    respondWhole(res, id, model, reply);
    return;
  }
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    ({ id, object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_fake', choices, ...extra });
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  sse(res, chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]));
  const text = reply.text ?? '';
  if (text) {
    const cut = Math.ceil(text.length / 2);
    for (const piece of [text.slice(0, cut), text.slice(cut)]) {
      if (piece) sse(res, chunk([{ index: 0, delta: { content: piece }, finish_reason: null }]));
    }
  }
  toolCallsOf(reply).forEach((call, index) => {
    // The name arrives with the id; the arguments stream in a following delta, as OpenAI sends them.
    sse(res, chunk([{ index: 0, delta: { tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] }, finish_reason: null }]));
    sse(res, chunk([{ index: 0, delta: { tool_calls: [{ index, function: { arguments: call.arguments } }] }, finish_reason: null }]));
  });
  const finish = reply.toolCalls?.length ? 'tool_calls' : 'stop';
  sse(res, chunk([{ index: 0, delta: {}, finish_reason: finish }]));
  if (body.stream_options?.include_usage) sse(res, chunk([], { usage: usageOf(reply) }));
  sse(res, '[DONE]');
  res.end();
};
