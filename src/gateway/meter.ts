/**
 * Metering on the wire: reads a copy of a vendor's response (streamed SSE or one JSON body, compressed or not) and
 * says which model served the call and what it used, normalised as contracts/usage.ts says. The meter only reads:
 * the bytes passed back to the sandbox never go through it, so a slow or failing parse cannot alter or delay them.
 * A response the meter cannot read leaves usage unknown (every field undefined), never zero.
 */
import zlib from 'node:zlib';
import { createParser } from 'eventsource-parser';
import type { VendorApi } from '../contracts/network.js';
import { noUsage, usageOf, type Usage } from '../contracts/usage.js';

/** What a meter read from one response. */
export interface Metered {
  readonly model?: string;
  readonly usage: Usage;
  /** Whether the response was a server-sent-event stream. */
  readonly streamed: boolean;
}

/** A meter for one response: `write` every chunk passed back (a copy is read), then `finish`. */
export interface Meter {
  write(chunk: Buffer): void;
  finish(): Promise<Metered>;
}

/** A JSON response larger than this is not metered (its usage stays unknown): the meter's memory stays bounded. */
export const maxMeteredJsonBytes = 16 * 1024 * 1024;

type Shape = Exclude<VendorApi, 'any'>;
type Json = Record<string, unknown>;

/** A meter for a response of `api` with these response headers. */
export function createMeter(api: VendorApi, contentType: string | undefined, contentEncoding: string | undefined): Meter {
  const streamed = (contentType ?? '').toLowerCase().includes('text/event-stream');
  const reader = streamed ? sseReader(api) : jsonReader(api);
  const decoder = decompressor(contentEncoding);
  let failed = false;
  const feed = (chunk: Buffer) => {
    if (failed) return;
    try {
      reader.feed(chunk);
    } catch {
      failed = true; // a reader bug or a hostile body: unknown usage, the pass-through goes on
    }
  };
  const done = decoder
    ? new Promise<void>((resolve) => {
        decoder.on('data', feed);
        decoder.on('end', resolve);
        decoder.on('error', () => {
          failed = true;
          resolve();
        });
      })
    : Promise.resolve();
  return {
    write(chunk) {
      if (decoder) decoder.write(chunk);
      else feed(chunk);
    },
    async finish() {
      decoder?.end();
      await done;
      if (failed) return { usage: noUsage, streamed };
      try {
        const read = reader.result();
        return { ...read, streamed };
      } catch {
        return { usage: noUsage, streamed };
      }
    },
  };
}

function decompressor(encoding: string | undefined): zlib.Gunzip | zlib.BrotliDecompress | zlib.Inflate | undefined {
  switch ((encoding ?? '').trim().toLowerCase()) {
    case 'gzip':
    case 'x-gzip':
      return zlib.createGunzip();
    case 'br':
      return zlib.createBrotliDecompress();
    case 'deflate':
      return zlib.createInflate();
    default:
      return undefined;
  }
}

interface Reader {
  feed(chunk: Buffer): void;
  result(): { model?: string; usage: Usage };
}

/** SSE: every event's JSON goes to the API's fold; `[DONE]` and non-JSON data are skipped. */
function sseReader(api: VendorApi): Reader {
  const text = new TextDecoder();
  let shape: Shape | undefined = api === 'any' ? undefined : api;
  const state: StreamState = {};
  const parser = createParser({
    onEvent(event) {
      if (event.data === '[DONE]') return;
      let data: unknown;
      try {
        data = JSON.parse(event.data);
      } catch {
        return;
      }
      if (!isObject(data)) return;
      shape ??= streamShape(data);
      if (shape) foldEvent(shape, data, state);
    },
  });
  return {
    feed: (chunk) => parser.feed(text.decode(chunk, { stream: true })),
    result: () => {
      parser.feed(text.decode());
      return shape ? streamResult(shape, state) : { usage: noUsage };
    },
  };
}

/** One JSON body (or, for Gemini's non-SSE stream, a JSON array of chunks), read when it ends. */
function jsonReader(api: VendorApi): Reader {
  const chunks: Buffer[] = [];
  let size = 0;
  return {
    feed(chunk) {
      size += chunk.length;
      if (size <= maxMeteredJsonBytes) chunks.push(chunk);
    },
    result() {
      if (size > maxMeteredJsonBytes) return { usage: noUsage };
      const body: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (Array.isArray(body)) {
        // Gemini's streamGenerateContent without alt=sse: cumulative chunks, the last usage is the call's.
        const state: StreamState = {};
        for (const item of body) if (isObject(item)) foldEvent('gemini', item, state);
        return streamResult('gemini', state);
      }
      if (!isObject(body)) return { usage: noUsage };
      const shape = api === 'any' ? jsonShape(body) : api;
      return shape ? jsonResult(shape, body) : { usage: noUsage };
    },
  };
}

/** What a stream has said so far. */
interface StreamState {
  model?: string;
  start?: Json;
  final?: Json;
}

function foldEvent(shape: Shape, data: Json, state: StreamState): void {
  switch (shape) {
    case 'anthropic-messages': {
      if (data.type === 'message_start' && isObject(data.message)) {
        state.model = str(data.message.model) ?? state.model;
        if (isObject(data.message.usage)) state.start = data.message.usage;
      } else if (data.type === 'message_delta' && isObject(data.usage)) {
        state.final = { ...state.final, ...data.usage };
      }
      return;
    }
    case 'openai-responses': {
      const type = str(data.type) ?? '';
      if (isObject(data.response)) state.model = str(data.response.model) ?? state.model;
      if ((type === 'response.completed' || type === 'response.incomplete' || type === 'response.failed') && isObject(data.response) && isObject(data.response.usage)) {
        state.final = data.response.usage;
      }
      return;
    }
    case 'openai-chat': {
      state.model = str(data.model) ?? state.model;
      if (isObject(data.usage)) state.final = data.usage;
      return;
    }
    case 'gemini': {
      state.model = str(data.modelVersion) ?? state.model;
      if (isObject(data.usageMetadata)) state.final = data.usageMetadata; // cumulative: the last one is the call's
      return;
    }
  }
}

function streamResult(shape: Shape, state: StreamState): { model?: string; usage: Usage } {
  const model = state.model === undefined ? {} : { model: state.model };
  if (shape === 'anthropic-messages') {
    if (!state.start && !state.final) return { ...model, usage: noUsage };
    // message_delta's usage is cumulative and overrides message_start's where it repeats a field.
    return { ...model, usage: anthropicUsage({ ...state.start, ...state.final }) };
  }
  if (!state.final) return { ...model, usage: noUsage };
  return { ...model, usage: usageFor(shape, state.final) };
}

function jsonResult(shape: Shape, body: Json): { model?: string; usage: Usage } {
  const modelName = shape === 'gemini' ? str(body.modelVersion) : str(body.model);
  const model = modelName === undefined ? {} : { model: modelName };
  const usage = shape === 'gemini' ? body.usageMetadata : body.usage;
  return { ...model, usage: isObject(usage) ? usageFor(shape, usage) : noUsage };
}

function usageFor(shape: Shape, u: Json): Usage {
  switch (shape) {
    case 'anthropic-messages':
      return anthropicUsage(u);
    case 'openai-responses':
      return openaiUsage(u.input_tokens, u.output_tokens, sub(u.input_tokens_details, 'cached_tokens'), sub(u.output_tokens_details, 'reasoning_tokens'));
    case 'openai-chat':
      return openaiUsage(u.prompt_tokens, u.completion_tokens, sub(u.prompt_tokens_details, 'cached_tokens'), sub(u.completion_tokens_details, 'reasoning_tokens'));
    case 'gemini':
      return geminiUsage(u);
  }
}

/** Anthropic: `input_tokens` already excludes the cache; thinking is inside `output_tokens` (reasoning unknown). */
function anthropicUsage(u: Json): Usage {
  return usageOf({ input: u.input_tokens, output: u.output_tokens, cacheRead: u.cache_read_input_tokens, cacheWrite: u.cache_creation_input_tokens });
}

/** OpenAI (both APIs): the input count includes cached tokens and the output count reasoning tokens; take them out. */
function openaiUsage(input: unknown, output: unknown, cached: unknown, reasoning: unknown): Usage {
  const raw = usageOf({ input, output, cacheRead: cached, reasoning });
  return usageOf({
    input: minus(raw.input, raw.cacheRead),
    output: minus(raw.output, raw.reasoning),
    cacheRead: raw.cacheRead,
    reasoning: raw.reasoning,
  });
}

/**
 * Gemini: `promptTokenCount` includes `cachedContentTokenCount`; thinking (`thoughtsTokenCount`) is apart from
 * `candidatesTokenCount`. The API's JSON omits zero counts (proto3), so when it reports usage at all, an absent
 * cache or thoughts count is 0. It has no cache-write count.
 */
function geminiUsage(u: Json): Usage {
  if (u.promptTokenCount === undefined && u.candidatesTokenCount === undefined) return noUsage;
  const raw = usageOf({ input: u.promptTokenCount ?? 0, output: u.candidatesTokenCount ?? 0, cacheRead: u.cachedContentTokenCount ?? 0, reasoning: u.thoughtsTokenCount ?? 0 });
  return usageOf({ input: minus(raw.input, raw.cacheRead), output: raw.output, cacheRead: raw.cacheRead, reasoning: raw.reasoning });
}

/** `a - b` when `a` is known (an unknown `b` counts as nothing taken out); never below zero. */
function minus(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? undefined : Math.max(0, a - (b ?? 0));
}

/** `any`: the first stream event that names its protocol. */
function streamShape(data: Json): Shape | undefined {
  const type = str(data.type) ?? '';
  if (type.startsWith('message_') || type.startsWith('content_block_')) return 'anthropic-messages';
  if (type.startsWith('response.')) return 'openai-responses';
  if (data.object === 'chat.completion.chunk') return 'openai-chat';
  if ('candidates' in data || 'usageMetadata' in data) return 'gemini';
  return undefined;
}

/** `any`: a whole JSON response by its shape. */
function jsonShape(body: Json): Shape | undefined {
  if (body.type === 'message') return 'anthropic-messages';
  if (body.object === 'response') return 'openai-responses';
  if (body.object === 'chat.completion') return 'openai-chat';
  if ('candidates' in body || 'usageMetadata' in body) return 'gemini';
  return undefined;
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v.length > 0 && v.length <= 200 ? v : undefined;
}

function sub(v: unknown, key: string): unknown {
  return isObject(v) ? v[key] : undefined;
}
