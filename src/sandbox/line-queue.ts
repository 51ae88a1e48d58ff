/** A single-consumer async queue of stdout lines, fed by a byte stream. */
import { StringDecoder } from 'node:string_decoder';

/** Splits bytes into lines (`\n`, with a trailing `\r` removed) and hands them out as an async iterable. */
export class LineQueue implements AsyncIterable<string> {
  private readonly decoder = new StringDecoder('utf8');
  private parts: string[] = [];
  /** Lines not yet taken are `ready[head..]`: taking one moves `head`, never the array (`shift` is O(n)). */
  private ready: string[] = [];
  private head = 0;
  private waiting: ((result: IteratorResult<string>) => void) | undefined;
  private ended = false;

  /** Adds a chunk of output; complete lines become available at once. Lines of any length are kept whole. */
  push(chunk: Buffer | string): void {
    if (this.ended) return;
    const text = typeof chunk === 'string' ? chunk : this.decoder.write(chunk);
    // Only the new text is scanned and pieces are joined once per line, so huge lines stay linear.
    let start = 0;
    let newline = text.indexOf('\n');
    while (newline !== -1) {
      this.parts.push(text.slice(start, newline));
      this.deliver(this.parts.join(''));
      this.parts = [];
      start = newline + 1;
      newline = text.indexOf('\n', start);
    }
    if (start < text.length) this.parts.push(text.slice(start));
  }

  /** Ends the stream; a final line without a newline is still delivered. Idempotent. */
  end(): void {
    if (this.ended) return;
    const rest = this.parts.join('') + this.decoder.end();
    if (rest.length > 0) this.deliver(rest);
    this.parts = [];
    this.ended = true;
    this.wake();
  }

  private deliver(line: string): void {
    this.ready.push(line.endsWith('\r') ? line.slice(0, -1) : line);
    this.wake();
  }

  /** The oldest line not yet taken; the taken ones are dropped once they are most of the array. */
  private take(): string | undefined {
    if (this.head >= this.ready.length) return undefined;
    const line = this.ready[this.head++];
    if (this.head === this.ready.length) {
      this.ready = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.ready.length) {
      this.ready = this.ready.slice(this.head);
      this.head = 0;
    }
    return line;
  }

  private wake(): void {
    const resolve = this.waiting;
    if (!resolve) return;
    const line = this.take();
    if (line !== undefined) {
      this.waiting = undefined;
      resolve({ value: line, done: false });
    } else if (this.ended) {
      this.waiting = undefined;
      resolve({ value: undefined, done: true });
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<string> {
    return {
      next: () => {
        const line = this.take();
        if (line !== undefined) return Promise.resolve({ value: line, done: false });
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => {
          this.waiting = resolve;
        });
      },
      return: () => Promise.resolve({ value: undefined, done: true }),
    };
  }
}
