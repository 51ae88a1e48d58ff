/**
 * JSON-RPC 2.0 over stdio lines for the two-way protocols no SDK speaks (codex `app-server`): a peer that sends
 * requests and awaits their responses, answers the CLI's own requests, and hands on its notifications. The two
 * sides' ids are separate spaces; ours count from 1.
 */
import { z } from 'zod';
import type { SessionIo } from '../driver.js';

const id = z.union([z.number(), z.string()]);

/** Any JSON-RPC message; which kind it is follows from `method` and `id`. Validated: it comes from the CLI. */
const rpcMessage = z.object({
  id: id.nullish(),
  method: z.string().nullish(),
  params: z.unknown().optional(),
  result: z.unknown().optional(),
  error: z.object({ code: z.number().nullish(), message: z.string().nullish(), data: z.unknown().optional() }).loose().nullish(),
});

/** An error answer to one of our requests. */
export class RpcError extends Error {
  constructor(
    readonly code: number | undefined,
    message: string,
  ) {
    super(message);
  }
}

/** The CLI's output ended (it exited, or the turn was stopped) before the answer came. */
export class RpcClosed extends Error {
  constructor() {
    super('the output ended before the answer');
  }
}

/** JSON-RPC's "Method not found", for requests a client does not implement. */
export const methodNotFound = -32601;

/** What the peer does with what the CLI sends. */
export interface RpcHandlers {
  /** A request of the CLI (it waits): the result, or a thrown `RpcError` for an error answer. */
  request(method: string, params: unknown, requestId: number | string): Promise<unknown>;
  notification(method: string, params: unknown): void;
}

/** One process's JSON-RPC conversation. `listen()` reads its output until it ends. */
export class RpcPeer {
  private nextId = 1;
  private readonly pending = new Map<number | string, { resolve: (result: unknown) => void; reject: (error: Error) => void }>();
  private closed = false;
  private end!: () => void;
  /** Resolves when the output ended. */
  readonly ended = new Promise<void>((resolve) => (this.end = resolve));

  constructor(
    private readonly io: Pick<SessionIo, 'lines' | 'send' | 'emit' | 'signal'>,
    private readonly handlers: RpcHandlers,
  ) {}

  /** Sends a request and waits for its result; rejects with `RpcError` for an error answer, `RpcClosed` at the end. */
  request(method: string, params: unknown): Promise<unknown> {
    if (this.closed) return Promise.reject(new RpcClosed());
    const requestId = this.nextId++;
    const answer = new Promise<unknown>((resolve, reject) => this.pending.set(requestId, { resolve, reject }));
    this.write({ jsonrpc: '2.0', id: requestId, method, params });
    return answer;
  }

  notify(method: string, params?: unknown): void {
    this.write({ jsonrpc: '2.0', method, ...(params !== undefined ? { params } : {}) });
  }

  /**
   * Reads the output until it ends. After each response the next line waits a macrotask, so the code that awaited
   * the response runs before what follows it is handled: the session sees the protocol in the order it was printed.
   */
  async listen(): Promise<void> {
    try {
      for await (const line of this.io.lines) {
        const parsed = rpcMessage.safeParse(parseJson(line));
        if (!parsed.success) {
          this.io.emit({ type: 'unknown', raw: line });
          continue;
        }
        const message = parsed.data;
        if (typeof message.method === 'string') {
          if (message.id === undefined || message.id === null) this.handlers.notification(message.method, message.params);
          else void this.answer(message.id, message.method, message.params);
          continue;
        }
        const waiting = message.id !== undefined && message.id !== null ? this.pending.get(message.id) : undefined;
        if (!waiting) continue;
        this.pending.delete(message.id!);
        if (message.error) waiting.reject(new RpcError(message.error.code ?? undefined, errorText(message.error)));
        else waiting.resolve(message.result);
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } finally {
      this.closed = true;
      for (const waiting of this.pending.values()) waiting.reject(new RpcClosed());
      this.pending.clear();
      this.end();
    }
  }

  private async answer(requestId: number | string, method: string, params: unknown): Promise<void> {
    try {
      const result = await this.handlers.request(method, params, requestId);
      this.write({ jsonrpc: '2.0', id: requestId, result });
    } catch (error) {
      const code = error instanceof RpcError && error.code !== undefined ? error.code : -32603;
      this.write({ jsonrpc: '2.0', id: requestId, error: { code, message: (error as Error).message } });
    }
  }

  /** Nothing is written once the turn is stopped: no answer may reach a process that is being killed. */
  private write(message: unknown): void {
    if (!this.io.signal.aborted) this.io.send(JSON.stringify(message));
  }
}

function parseJson(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** The text of an error answer, its `data.details` included. */
export function errorText(error: { readonly message?: string | null; readonly code?: number | null; readonly data?: unknown }): string {
  const data = error.data as { details?: unknown } | string | undefined;
  const details = typeof data === 'string' ? data : typeof data?.details === 'string' ? data.details : undefined;
  return [error.message || `error ${error.code ?? '?'}`, details].filter(Boolean).join(': ');
}
