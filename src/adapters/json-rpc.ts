/**
 * JSON-RPC 2.0 over stdio lines, as the two-way modes of codex (`app-server`) and of the ACP agents (gemini
 * `--acp`, `opencode acp`) speak it. Both sides send requests: a line with `method` and `id` is a request from
 * the CLI (it waits for our answer), `method` without `id` a notification, `id` without `method` the response to
 * one of ours. The two sides' ids are separate spaces.
 */
import { z } from 'zod';

const id = z.union([z.number(), z.string()]);

/** Any JSON-RPC message; which kind it is follows from `method` and `id`. */
export const rpcMessage = z.object({
  id: id.nullish(),
  method: z.string().nullish(),
  params: z.unknown().optional(),
  result: z.unknown().optional(),
  error: z.object({ code: z.number().nullish(), message: z.string().nullish(), data: z.unknown().optional() }).loose().nullish(),
});
export type RpcMessage = z.infer<typeof rpcMessage>;

export type RpcKind = 'request' | 'notification' | 'response';

/** What a parsed message is. */
export function rpcKind(message: RpcMessage): RpcKind {
  if (typeof message.method === 'string') return message.id === undefined || message.id === null ? 'notification' : 'request';
  return 'response';
}

/** A request line (ours). */
export function rpcRequest(requestId: number | string, method: string, params: unknown): string {
  return JSON.stringify({ jsonrpc: '2.0', id: requestId, method, params });
}

/** A notification line (ours). */
export function rpcNotification(method: string, params?: unknown): string {
  return JSON.stringify({ jsonrpc: '2.0', method, ...(params !== undefined ? { params } : {}) });
}

/** The result of a request the CLI sent. */
export function rpcResult(requestId: number | string, result: unknown): string {
  return JSON.stringify({ jsonrpc: '2.0', id: requestId, result });
}

/** An error answer to a request the CLI sent (e.g. a method we do not offer). */
export function rpcError(requestId: number | string, code: number, message: string): string {
  return JSON.stringify({ jsonrpc: '2.0', id: requestId, error: { code, message } });
}

/** "Method not found", for requests a client does not implement. */
export const methodNotFound = -32601;

/** The error text of a response, for messages. */
export function rpcErrorText(message: RpcMessage): string {
  const error = message.error;
  if (!error) return 'unknown error';
  const data = error.data as { details?: unknown } | string | undefined;
  const details = typeof data === 'string' ? data : typeof data?.details === 'string' ? data.details : undefined;
  return [error.message ?? `error ${error.code ?? '?'}`, details].filter(Boolean).join(': ');
}
