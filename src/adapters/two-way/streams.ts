/**
 * A two-way session's stdio as the message streams a JSON-RPC library takes: each stdout line parsed as one JSON
 * message, each message written as one stdin line.
 */
import type { SessionIo } from '../driver.js';
import { parseJsonLine } from '../kit.js';

/** Both directions of one process's JSON-RPC traffic, as the ACP SDK's `Stream` has them. */
export interface MessageStreams<Message> {
  readonly readable: ReadableStream<Message>;
  readonly writable: WritableStream<Message>;
}

/**
 * The process's lines as parsed messages, and writes as lines. A line that is not a JSON object is reported as an
 * `unknown` event and never reaches the library. Once the turn is stopped nothing more is written: no answer may
 * reach a process that is being killed (a permission answer would let its tool run).
 *
 * After each response the next line waits a macrotask, so the code that awaited that response runs before the
 * messages that follow it are dispatched: a top-down session then sees its protocol in the order it was printed.
 */
export function messageStreams<Message>(io: Pick<SessionIo, 'lines' | 'send' | 'emit' | 'signal'>): MessageStreams<Message> {
  const lines = io.lines[Symbol.asyncIterator]();
  let afterResponse = false;
  const readable = new ReadableStream<Message>(
    {
      async pull(controller) {
        if (afterResponse) await new Promise<void>((resolve) => setImmediate(resolve));
        afterResponse = false;
        for (;;) {
          const next = await lines.next();
          if (next.done) {
            controller.close();
            return;
          }
          const message = parseObject(next.value);
          if (message === undefined) {
            io.emit({ type: 'unknown', raw: next.value });
            continue;
          }
          afterResponse = !('method' in message);
          controller.enqueue(message as Message);
          return;
        }
      },
      async cancel() {
        await lines.return?.();
      },
    },
    // Read only when the library asks: nothing is read ahead of the message it is handling.
    { highWaterMark: 0 },
  );
  const writable = new WritableStream<Message>({
    write(message) {
      if (!io.signal.aborted) io.send(JSON.stringify(message));
    },
  });
  return { readable, writable };
}

function parseObject(line: string): Record<string, unknown> | undefined {
  const value = parseJsonLine(line);
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}
