/**
 * Anthropic Messages API (`POST /v1/messages`) for the fake vendor: SSE when the request says `stream: true`
 * (what Claude Code sends), one JSON message otherwise. Event order and shapes follow the public API:
 * message_start (usage with cache fields) → per block content_block_start / _delta / _stop → message_delta
 * (stop_reason, output usage) → message_stop.
 */
import type http from 'node:http';
import { servedUsage, sse, type ProtocolHandler, type RecordedRequest, type ScriptedReply } from './server.js';

let counter = 0;
const nextId = (prefix: string): string => `${prefix}_fake${String(++counter).padStart(6, '0')}`;

function requestModel(request: RecordedRequest): string {
  const body = request.body as { model?: unknown } | undefined;
  return typeof body?.model === 'string' ? body.model : 'claude-fake-1';
}

/** Anthropic counts thinking tokens inside `output_tokens`. */
function usageOf(reply: ScriptedReply): { input_tokens: number; output_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number } {
  const u = servedUsage(reply);
  return {
    input_tokens: u.input,
    output_tokens: u.output + u.reasoning,
    cache_read_input_tokens: u.cacheRead,
    cache_creation_input_tokens: u.cacheWrite,
  };
}

type Block = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

function blocksOf(reply: ScriptedReply): Block[] {
  const blocks: Block[] = [];
  if (reply.text !== undefined) blocks.push({ type: 'text', text: reply.text });
  for (const call of reply.toolCalls ?? []) blocks.push({ type: 'tool_use', id: call.id ?? nextId('toolu'), name: call.name, input: call.input });
  if (blocks.length === 0) blocks.push({ type: 'text', text: '' });
  return blocks;
}

/** Splits a string into a few chunks so clients exercise their delta accumulation. */
function chunks(text: string, parts = 3): string[] {
  if (text.length < parts) return [text];
  const size = Math.ceil(text.length / parts);
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

function streamReply(request: RecordedRequest, reply: ScriptedReply, res: http.ServerResponse): void {
  const usage = usageOf(reply);
  const blocks = blocksOf(reply);
  const stopReason = reply.toolCalls?.length ? 'tool_use' : 'end_turn';
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'request-id': nextId('req') });
  sse(
    res,
    {
      type: 'message_start',
      message: {
        id: nextId('msg'),
        type: 'message',
        role: 'assistant',
        model: requestModel(request),
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...usage, output_tokens: 1 },
      },
    },
    'message_start',
  );
  sse(res, { type: 'ping' }, 'ping');
  blocks.forEach((block, index) => {
    if (block.type === 'text') {
      sse(res, { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }, 'content_block_start');
      for (const part of chunks(block.text)) {
        sse(res, { type: 'content_block_delta', index, delta: { type: 'text_delta', text: part } }, 'content_block_delta');
      }
    } else {
      sse(res, { type: 'content_block_start', index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } }, 'content_block_start');
      for (const part of chunks(JSON.stringify(block.input))) {
        sse(res, { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: part } }, 'content_block_delta');
      }
    }
    sse(res, { type: 'content_block_stop', index }, 'content_block_stop');
  });
  sse(res, { type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: usage.output_tokens } }, 'message_delta');
  sse(res, { type: 'message_stop' }, 'message_stop');
  res.end();
}

/** Handler for `/v1/messages` (Claude Code appends `?beta=true`; the prefix match ignores the query). */
export const anthropicMessages: ProtocolHandler = (request, reply, res) => {
  const body = request.body as { stream?: unknown } | undefined;
  if (body?.stream === true) {
    streamReply(request, reply, res);
    return;
  }
  const blocks = blocksOf(reply);
  res.writeHead(200, { 'content-type': 'application/json', 'request-id': nextId('req') });
  res.end(
    JSON.stringify({
      id: nextId('msg'),
      type: 'message',
      role: 'assistant',
      model: requestModel(request),
      content: blocks,
      stop_reason: reply.toolCalls?.length ? 'tool_use' : 'end_turn',
      stop_sequence: null,
      usage: usageOf(reply),
    }),
  );
};

