/**
 * A single-consumer async queue of stdout lines, fed by a byte stream. A harness controls how much it writes and
 * when; the queue never costs more than its caps, whatever it writes:
 * - no line is assembled beyond its cap: past it the queue only counts the bytes until the newline, keeps the
 *   line's opening and hands out one `OversizedLine` in its place;
 * - lines not yet taken are bounded: past a high-water mark it asks its producer to pause (`onPause`), and to
 *   resume (`onResume`) once the reader has taken half of them.
 */

/** How long a line may grow before it is streamed past (see docs/harnesses.md, "Output limits"). */
export interface LineLimits {
  /** The longest line assembled, in bytes, unless `allowsLongLine` accepts its opening. */
  readonly maxLineBytes: number;
  /** The longest line assembled at all (a terminal line with the envelope), in bytes. */
  readonly maxLongLineBytes: number;
  /**
   * Whether a line that passed `maxLineBytes` may grow to `maxLongLineBytes`, judged by its opening (the adapter
   * knows what its terminal line starts with). Absent: every line may.
   */
  readonly allowsLongLine?: (opening: string) => boolean;
}

/** Every harness line may be up to 1 MiB; a line the adapter calls terminal up to 8 MiB (twice the 4 MiB reply cap). */
export const defaultLineLimits: LineLimits = { maxLineBytes: 1024 * 1024, maxLongLineBytes: 8 * 1024 * 1024 };

/** How much of an oversized line is kept (for the operator to see what it was). */
export const oversizedOpeningBytes = 2048;

/** A line that was over its cap: never assembled, only counted. */
export class OversizedLine {
  constructor(
    /** The line's length in bytes (without its newline). */
    readonly bytes: number,
    /** The cap it passed. */
    readonly limit: number,
    /** Its first bytes, decoded. */
    readonly opening: string,
  ) {}
}

/** What the queue hands out: a line, or the report of one that was too large to assemble. */
export type OutputLine = string | OversizedLine;

export interface LineQueueOptions {
  readonly limits?: LineLimits;
  /** Lines not yet taken, in bytes, above which the producer is paused (default 1 MiB). */
  readonly highWaterBytes?: number;
  /** Lines not yet taken above which the producer is paused (default 4,096). */
  readonly highWaterLines?: number;
  /** Called when the backlog passes the high-water mark: stop reading the producer. */
  readonly onPause?: () => void;
  /** Called when the backlog is down to half the mark again (and at the end): read on. */
  readonly onResume?: () => void;
}

const newline = 0x0a;

/** Splits bytes into lines (`\n`, a trailing `\r` removed) and hands them out as an async iterable. */
export class LineQueue implements AsyncIterable<OutputLine> {
  private readonly limits: LineLimits;
  private readonly highWaterBytes: number;
  private readonly highWaterLines: number;
  /** The current line's pieces (bytes), while it is within its cap. */
  private parts: Buffer[] = [];
  /** The current line's length so far, in bytes. */
  private lineBytes = 0;
  /** The current line's cap: `maxLineBytes`, raised to `maxLongLineBytes` once its opening allowed it. */
  private lineCap: number;
  /** Set once the current line passed its cap: its opening, the rest is only counted. */
  private oversizedOpening: string | undefined;
  /** Lines not yet taken are `ready[head..]`: taking one moves `head`, never the array (`shift` is O(n)). */
  private ready: OutputLine[] = [];
  private head = 0;
  /** Characters of the lines not yet taken (≈ bytes; what the backlog holds in memory). */
  private readyChars = 0;
  private paused = false;
  private waiting: ((result: IteratorResult<OutputLine>) => void) | undefined;
  private ended = false;

  constructor(private readonly options: LineQueueOptions = {}) {
    this.limits = options.limits ?? defaultLineLimits;
    this.lineCap = this.limits.maxLineBytes;
    this.highWaterBytes = options.highWaterBytes ?? 1024 * 1024;
    this.highWaterLines = options.highWaterLines ?? 4096;
  }

  /** Whether the queue asked its producer to pause and has not asked it to resume yet. */
  get isPaused(): boolean {
    return this.paused;
  }

  /** Lines not yet taken. */
  get backlog(): number {
    return this.ready.length - this.head;
  }

  /** Adds a chunk of output; complete lines become available at once. */
  push(chunk: Buffer | string): void {
    if (this.ended) return;
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    // A newline byte never occurs inside a UTF-8 sequence: splitting bytes is safe, and each line is decoded once.
    let start = 0;
    for (let at = bytes.indexOf(newline, start); at !== -1; at = bytes.indexOf(newline, start)) {
      if (this.parts.length === 0 && this.oversizedOpening === undefined && at - start <= this.lineCap) {
        this.deliver(bytes.toString('utf8', start, at)); // the common case: a whole line in one chunk
      } else {
        this.append(bytes, start, at);
        this.completeLine();
      }
      start = at + 1;
    }
    if (start < bytes.length) this.append(bytes, start, bytes.length);
    if (!this.paused && (this.readyChars > this.highWaterBytes || this.backlog > this.highWaterLines)) {
      this.paused = true;
      this.options.onPause?.();
    }
  }

  /** Ends the stream; a final line without a newline is still delivered. Idempotent. */
  end(): void {
    if (this.ended) return;
    if (this.lineBytes > 0 || this.parts.length > 0) this.completeLine();
    this.ended = true;
    this.resume();
    this.wake();
  }

  /** Adds `bytes[start..end)` to the current line, streaming past it once it is over its cap. */
  private append(bytes: Buffer, start: number, end: number): void {
    if (end <= start) return;
    this.lineBytes += end - start;
    if (this.oversizedOpening !== undefined) return;
    // A copy: a slice would keep the producer's whole chunk alive for a few bytes of an unfinished line.
    this.parts.push(Buffer.from(bytes.subarray(start, end)));
    if (this.lineBytes <= this.lineCap) return;
    const opening = Buffer.concat(this.parts).toString('utf8', 0, Math.min(oversizedOpeningBytes, this.lineBytes));
    if (this.lineCap < this.limits.maxLongLineBytes && (this.limits.allowsLongLine?.(opening) ?? true)) {
      this.lineCap = this.limits.maxLongLineBytes;
      if (this.lineBytes <= this.lineCap) return;
    }
    this.oversizedOpening = opening;
    this.parts = [];
  }

  private completeLine(): void {
    if (this.oversizedOpening !== undefined) {
      this.deliver(new OversizedLine(this.lineBytes, this.lineCap, this.oversizedOpening));
    } else {
      this.deliver(this.parts.length === 1 ? this.parts[0]!.toString('utf8') : Buffer.concat(this.parts).toString('utf8'));
    }
    this.parts = [];
    this.lineBytes = 0;
    this.lineCap = this.limits.maxLineBytes;
    this.oversizedOpening = undefined;
  }

  private deliver(line: OutputLine): void {
    const item = typeof line === 'string' && line.endsWith('\r') ? line.slice(0, -1) : line;
    this.ready.push(item);
    this.readyChars += typeof item === 'string' ? item.length : item.opening.length;
    this.wake();
  }

  /** The oldest line not yet taken; the taken ones are dropped once they are most of the array. */
  private take(): OutputLine | undefined {
    if (this.head >= this.ready.length) return undefined;
    const line = this.ready[this.head]!;
    this.ready[this.head++] = ''; // let the line go now, not when the array is compacted
    this.readyChars -= typeof line === 'string' ? line.length : line.opening.length;
    if (this.head === this.ready.length) {
      this.ready = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.ready.length) {
      this.ready = this.ready.slice(this.head);
      this.head = 0;
    }
    if (this.paused && this.readyChars <= this.highWaterBytes / 2 && this.backlog <= this.highWaterLines / 2) this.resume();
    return line;
  }

  private resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.options.onResume?.();
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

  private next(): Promise<IteratorResult<OutputLine>> {
    const line = this.take();
    if (line !== undefined) return Promise.resolve({ value: line, done: false });
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => {
      this.waiting = resolve;
    });
  }

  [Symbol.asyncIterator](): AsyncIterator<OutputLine> {
    return { next: () => this.next(), return: () => Promise.resolve({ value: undefined, done: true }) };
  }

  /** The lines as text only: oversized lines are skipped (for callers that only want what was readable). */
  text(): AsyncIterable<string> {
    return {
      [Symbol.asyncIterator]: () => ({
        next: async (): Promise<IteratorResult<string>> => {
          for (;;) {
            const r = await this.next();
            if (r.done) return { value: undefined, done: true };
            if (typeof r.value === 'string') return { value: r.value, done: false };
          }
        },
        return: () => Promise.resolve({ value: undefined, done: true }),
      }),
    };
  }
}
