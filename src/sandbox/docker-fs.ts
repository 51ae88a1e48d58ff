/**
 * `SandboxFs` for a Docker sandbox: the file operations run INSIDE the container, as the sandbox user, by
 * fs-helper.mjs (the same no-follow walk as the local provider) — never on the host path of the bind mount.
 * One long-lived `docker exec` of the helper per container answers one JSON request per line; it is started on
 * first use, closed after a quiet spell, and restarted when something (the turn-end sweep) killed it.
 */
import { createInterface } from 'node:readline';
import type { Duplex } from 'node:stream';
import type { DockerClient, StartedExec } from './docker-client.js';
import { exitCodeOf } from './docker-client.js';
import type { SandboxEntryType, SandboxFs } from './types.js';
import { fsHelperScript, maxReadBytes, SandboxFsError, sandboxFsError } from './workspace-fs.js';

/** How long an idle helper stays up (the next action of a turn usually follows within milliseconds). */
const defaultIdleMs = 15_000;
const stderrTailChars = 2000;

/** Where and as whom the helper runs. */
export interface DockerFsHelperOptions {
  readonly client: DockerClient;
  readonly container: string;
  readonly user: string;
  /** The workspace inside the container. */
  readonly workspacePath: string;
  /** PATH inside the container (the helper needs `node`). */
  readonly path: string;
  readonly idleMs?: number;
}

interface Reply {
  readonly id?: unknown;
  readonly ok?: unknown;
  readonly result?: unknown;
  readonly error?: { readonly code?: unknown; readonly message?: unknown };
}

/** One running helper: requests go out as lines, replies come back in order. */
class Channel {
  private readonly pending = new Map<number, { resolve: (reply: Reply) => void; reject: (error: Error) => void }>();
  private nextId = 1;
  private stderr = '';
  dead = false;

  constructor(
    private readonly started: StartedExec,
    client: DockerClient,
    onDead: () => void,
  ) {
    const { stdout, stderr } = client.demux(started.stream);
    stderr.setEncoding('utf8');
    stderr.on('data', (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-stderrTailChars);
    });
    const lines = createInterface({ input: stdout, crlfDelay: Infinity });
    lines.on('line', (line) => this.onLine(line));
    const end = (): void => {
      if (this.dead) return;
      this.dead = true;
      onDead();
      void this.failPending();
    };
    started.stream.once('end', end);
    started.stream.once('close', end);
    started.stream.once('error', end);
  }

  get stream(): Duplex {
    return this.started.stream;
  }

  /** The helper's exec as the engine sees it (running or not, its host pid). */
  inspect(): ReturnType<StartedExec['inspect']> {
    return this.started.inspect();
  }

  send(request: Record<string, unknown>): Promise<Reply> {
    if (this.dead) return Promise.reject(new HelperGone('the workspace helper had stopped'));
    const id = this.nextId++;
    return new Promise<Reply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.started.stream.write(`${JSON.stringify({ ...request, id })}\n`);
    });
  }

  get idle(): boolean {
    return this.pending.size === 0;
  }

  end(): void {
    this.started.stream.end();
  }

  private onLine(line: string): void {
    let reply: Reply;
    try {
      reply = JSON.parse(line) as Reply;
    } catch {
      return; // not the helper's: ignore
    }
    const waiter = typeof reply.id === 'number' ? this.pending.get(reply.id) : undefined;
    if (!waiter) return;
    this.pending.delete(reply.id as number);
    waiter.resolve(reply);
  }

  private async failPending(): Promise<void> {
    if (this.pending.size === 0) return;
    const code = await exitCodeOf(this.started, 500).catch(() => null);
    const missingNode = (code === 126 || code === 127) && /node/.test(this.stderr);
    const error = missingNode
      ? new SandboxFsError('Io', 'The sandbox image has no `node` on PATH; workspace file operations run a small Node helper inside the container.')
      : new HelperGone(`the workspace helper stopped (exit ${code ?? 'unknown'})`);
    for (const waiter of this.pending.values()) waiter.reject(error);
    this.pending.clear();
  }
}

/** The helper went away mid-request (killed by a sweep, container restarted): safe to ask a fresh one. */
class HelperGone extends Error {}

/** The long-lived helper of one container; requests are serialised. */
export class DockerFsHelper {
  private channel: Promise<Channel> | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private idleTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: DockerFsHelperOptions) {}

  /** Sends one request and returns its result; a helper that died before answering is replaced once. */
  request(request: Record<string, unknown>): Promise<unknown> {
    const run = this.queue.then(
      () => this.attempt(request, true),
      () => this.attempt(request, true),
    );
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * The helper's host pid while it runs, so the turn-end check does not take it for a turn's leftover. Asked of the
   * engine after the caller listed the container's processes: a helper still running then held that pid all along.
   */
  async ownPids(): Promise<number[]> {
    const channel = await this.channel?.catch(() => undefined);
    if (!channel || channel.dead) return [];
    const info = await channel.inspect().catch(() => undefined);
    return info?.Running === true && typeof info.Pid === 'number' && info.Pid > 1 ? [info.Pid] : [];
  }

  /** Stops the helper (its stdin closes and it exits). */
  close(): void {
    clearTimeout(this.idleTimer);
    const channel = this.channel;
    this.channel = undefined;
    void channel?.then((c) => c.end(), () => undefined);
  }

  private async attempt(request: Record<string, unknown>, retry: boolean): Promise<unknown> {
    clearTimeout(this.idleTimer);
    const channel = await this.open();
    setRef(channel.stream, true);
    let reply: Reply;
    try {
      reply = await channel.send(request);
    } catch (error) {
      if (error instanceof HelperGone && retry) return this.attempt(request, false);
      if (error instanceof HelperGone) throw new SandboxFsError('Io', `The workspace operation failed: ${error.message}.`);
      throw error;
    } finally {
      this.scheduleIdle(channel);
    }
    if (reply.ok === true) return reply.result;
    const code = typeof reply.error?.code === 'string' ? reply.error.code : 'Io';
    const message = typeof reply.error?.message === 'string' ? reply.error.message : 'The workspace operation failed.';
    throw sandboxFsError(code, message);
  }

  private open(): Promise<Channel> {
    if (this.channel) {
      const current = this.channel;
      return current.then((c) => {
        if (!c.dead) return c;
        if (this.channel === current) this.channel = undefined;
        return this.open();
      });
    }
    const opening = this.start();
    this.channel = opening;
    opening.catch(() => {
      if (this.channel === opening) this.channel = undefined;
    });
    return opening;
  }

  private async start(): Promise<Channel> {
    const { client, container, user, workspacePath, path } = this.options;
    const started = await client.exec(container, {
      argv: ['node', '--input-type=module', '-e', fsHelperScript(), '--', workspacePath],
      env: [`PATH=${path}`, 'LANG=C.UTF-8'],
      user,
      workdir: workspacePath,
      stdin: true,
    });
    const channel: Channel = new Channel(started, client, () => {
      void this.channel?.then((c) => {
        if (c === channel) this.channel = undefined;
      });
    });
    return channel;
  }

  private scheduleIdle(channel: Channel): void {
    clearTimeout(this.idleTimer);
    if (!channel.idle) return;
    // While idle the helper must not keep the worker process alive.
    setRef(channel.stream, false);
    this.idleTimer = setTimeout(() => this.close(), this.options.idleMs ?? defaultIdleMs);
    this.idleTimer.unref();
  }
}

function setRef(stream: Duplex, on: boolean): void {
  const socket = stream as Duplex & { ref?: () => void; unref?: () => void };
  if (on) socket.ref?.();
  else socket.unref?.();
}

const entryTypes: readonly string[] = ['file', 'directory', 'symlink', 'other'];
const isEntryType = (value: unknown): value is SandboxEntryType => typeof value === 'string' && entryTypes.includes(value);

function shapeError(op: string): SandboxFsError {
  return new SandboxFsError('Io', `The workspace helper answered ${op} with something unexpected.`);
}

/** `SandboxFs` answered by the helper inside the container. Replies are checked: the helper shares the sandbox user. */
export class DockerWorkspaceFs implements SandboxFs {
  constructor(private readonly helper: DockerFsHelper) {}

  async stat(rel: string): Promise<{ type: SandboxEntryType; size: number } | undefined> {
    const result = (await this.helper.request({ op: 'stat', path: rel })) as { type?: unknown; size?: unknown } | null;
    if (result === null) return undefined;
    if (!isEntryType(result?.type) || typeof result.size !== 'number') throw shapeError('stat');
    return { type: result.type, size: result.size };
  }

  async readFile(rel: string, options: { maxBytes?: number } = {}): Promise<{ data: Buffer; size: number }> {
    const maxBytes = Math.min(options.maxBytes ?? maxReadBytes, maxReadBytes);
    const result = (await this.helper.request({ op: 'read', path: rel, maxBytes })) as { data?: unknown; size?: unknown };
    if (typeof result?.data !== 'string' || typeof result.size !== 'number') throw shapeError('read');
    return { data: Buffer.from(result.data, 'base64').subarray(0, maxBytes), size: result.size };
  }

  async writeFile(rel: string, data: string | Uint8Array, options: { createParents?: boolean; mode?: number } = {}): Promise<{ bytes: number }> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    await this.helper.request({ op: 'write', path: rel, data: bytes.toString('base64'), createParents: options.createParents, mode: options.mode });
    return { bytes: bytes.length };
  }

  async list(rel: string): Promise<{ name: string; type: SandboxEntryType }[]> {
    const result = await this.helper.request({ op: 'list', path: rel });
    if (!Array.isArray(result)) throw shapeError('list');
    return result.map((entry: { name?: unknown; type?: unknown }) => {
      if (typeof entry?.name !== 'string' || !isEntryType(entry.type)) throw shapeError('list');
      return { name: entry.name, type: entry.type };
    });
  }

  async mkdir(rel: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.helper.request({ op: 'mkdir', path: rel, recursive: options.recursive });
  }
}
