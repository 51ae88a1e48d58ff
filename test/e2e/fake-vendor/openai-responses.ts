/**
 * OpenAI Responses API (`POST /v1/responses`) for the fake vendor, SSE as the Codex CLI asks for it:
 * response.created → response.in_progress → per output item output_item.added, (content_part / output_text
 * deltas | function_call_arguments deltas), output_item.done → response.completed with usage.
 * Usage follows the API: `input_tokens` INCLUDES the cached tokens, reported in `input_tokens_details`.
 */
import type http from 'node:http';
import { servedUsage, sse, type ProtocolHandler, type RecordedRequest, type ScriptedReply } from './server.js';

let counter = 0;
const nextId = (prefix: string): string => `${prefix}_fake${String(++counter).padStart(6, '0')}`;

function requestModel(request: RecordedRequest): string {
  const body = request.body as { model?: unknown } | undefined;
  return typeof body?.model === 'string' ? body.model : 'gpt-fake-1';
}

/**
 * Scripted usage is normalised (input excludes cache, output excludes reasoning); the wire format adds the cached
 * tokens back into `input_tokens` and the reasoning tokens into `output_tokens`, as the API does.
 */
function usageOf(reply: ScriptedReply): Record<string, unknown> {
  const u = servedUsage(reply);
  return {
    input_tokens: u.input + u.cacheRead,
    input_tokens_details: { cached_tokens: u.cacheRead },
    output_tokens: u.output + u.reasoning,
    output_tokens_details: { reasoning_tokens: u.reasoning },
    total_tokens: u.input + u.cacheRead + u.output + u.reasoning,
  };
}

function chunks(text: string, parts = 3): string[] {
  if (text.length < parts) return [text];
  const size = Math.ceil(text.length / parts);
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

type Item =
  | { id: string; type: 'message'; status: 'completed'; role: 'assistant'; content: { type: 'output_text'; text: string; annotations: [] }[] }
  | { id: string; type: 'function_call'; status: 'completed'; call_id: string; name: string; namespace?: string; arguments: string }
  | { id: string; type: 'tool_search_call'; status: 'completed'; call_id: string; execution: 'client'; arguments: Record<string, unknown> }
  | { id: string; type: 'custom_tool_call'; status: 'completed'; call_id: string; name: string; input: string };

function itemsOf(reply: ScriptedReply): Item[] {
  const items: Item[] = [];
  if (reply.text !== undefined) {
    items.push({ id: nextId('msg'), type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: reply.text, annotations: [] }] });
  }
  for (const call of reply.toolCalls ?? []) {
    const callId = call.id ?? nextId('call');
    // Codex's apply_patch is a freeform (grammar) tool: its call carries raw text, not JSON arguments.
    if (call.toolSearch) items.push({ id: nextId('tsc'), type: 'tool_search_call', status: 'completed', call_id: callId, execution: 'client', arguments: call.input });
    else if (call.freeform !== undefined) items.push({ id: nextId('ctc'), type: 'custom_tool_call', status: 'completed', call_id: callId, name: call.name, input: call.freeform });
    else items.push({ id: nextId('fc'), type: 'function_call', status: 'completed', call_id: callId, name: call.name, ...(call.namespace ? { namespace: call.namespace } : {}), arguments: JSON.stringify(call.input) });
  }
  return items;
}

/** Handler for `/v1/responses`; always streams (the non-streaming form is answered as the final object). */
export const openaiResponses: ProtocolHandler = (request, reply, res) => {
  const body = request.body as { stream?: unknown } | undefined;
  const items = itemsOf(reply);
  const base = {
    id: nextId('resp'),
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model: requestModel(request),
    error: null,
    incomplete_details: null,
    parallel_tool_calls: true,
    tool_choice: 'auto',
    tools: [],
  };
  const completed = { ...base, status: 'completed', output: items, usage: usageOf(reply) };
  if (body?.stream !== true) {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(completed));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  let seq = 0;
  const send = (data: Record<string, unknown>): void => sse(res, { ...data, sequence_number: seq++ }, data.type as string);
  const inProgress = { ...base, status: 'in_progress', output: [], usage: null };
  send({ type: 'response.created', response: inProgress });
  send({ type: 'response.in_progress', response: inProgress });
  items.forEach((item, outputIndex) => {
    if (item.type === 'message') {
      const text = item.content[0]?.text ?? '';
      send({ type: 'response.output_item.added', output_index: outputIndex, item: { ...item, status: 'in_progress', content: [] } });
      const part = { type: 'output_text', text: '', annotations: [] };
      send({ type: 'response.content_part.added', item_id: item.id, output_index: outputIndex, content_index: 0, part });
      for (const delta of chunks(text)) {
        send({ type: 'response.output_text.delta', item_id: item.id, output_index: outputIndex, content_index: 0, delta, logprobs: [] });
      }
      send({ type: 'response.output_text.done', item_id: item.id, output_index: outputIndex, content_index: 0, text, logprobs: [] });
      send({ type: 'response.content_part.done', item_id: item.id, output_index: outputIndex, content_index: 0, part: { ...part, text } });
    } else if (item.type === 'custom_tool_call') {
      send({ type: 'response.output_item.added', output_index: outputIndex, item: { ...item, status: 'in_progress', input: '' } });
      for (const delta of chunks(item.input)) send({ type: 'response.custom_tool_call_input.delta', item_id: item.id, output_index: outputIndex, delta });
      send({ type: 'response.custom_tool_call_input.done', item_id: item.id, output_index: outputIndex, input: item.input });
    } else if (item.type === 'tool_search_call') {
      send({ type: 'response.output_item.added', output_index: outputIndex, item: { ...item, status: 'in_progress' } });
    } else {
      send({ type: 'response.output_item.added', output_index: outputIndex, item: { ...item, status: 'in_progress', arguments: '' } });
      for (const delta of chunks(item.arguments)) {
        send({ type: 'response.function_call_arguments.delta', item_id: item.id, output_index: outputIndex, delta });
      }
      send({ type: 'response.function_call_arguments.done', item_id: item.id, output_index: outputIndex, arguments: item.arguments });
    }
    send({ type: 'response.output_item.done', output_index: outputIndex, item });
  });
  send({ type: 'response.completed', response: completed });
  res.end();
};

/** Writes a raw SSE stream for tests that need a malformed or failing one. */
export function writeResponsesEvents(res: http.ServerResponse, events: readonly Record<string, unknown>[]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const event of events) sse(res, event, event.type as string);
  res.end();
}
