/**
 * A small interface over dockerode (after testcontainers-node's container client): the few calls the
 * provider needs, idempotent where the provider needs idempotence, and engine errors mapped to typed ones.
 */
import { PassThrough, type Duplex } from 'node:stream';
import Dockerode from 'dockerode';
import { cgroupProcesses, containerCgroupDir, type ContainerProcess } from './docker-cgroup.js';
import { DockerUnavailable, SandboxContainerGone, SandboxImageMissing } from './docker-errors.js';

/** The socket `.ci/docker-engine.sh` starts the engine on. */
export const ciDockerSocket = '/tmp/dockerd/docker.sock';

/** A dockerode client for `DOCKER_HOST` (dockerode reads it), or the default socket when it is unset. */
export function dockerFromEnvironment(): Dockerode {
  return new Dockerode();
}

interface EngineError {
  statusCode?: number;
  code?: string;
  syscall?: string;
  message?: string;
  json?: { message?: string } | null;
}

function engineError(error: unknown): EngineError {
  return typeof error === 'object' && error !== null ? (error as EngineError) : {};
}

/** The engine's own message, without dockerode's "(HTTP code 404) no such container -" prefix. */
export function engineMessage(error: unknown): string {
  const e = engineError(error);
  return e.json?.message ?? e.message ?? String(error);
}

export function isNotFound(error: unknown): boolean {
  return engineError(error).statusCode === 404;
}

export function isConflict(error: unknown): boolean {
  return engineError(error).statusCode === 409;
}

/** 304: already started / already stopped. */
export function isNotModified(error: unknown): boolean {
  return engineError(error).statusCode === 304;
}

const connectionCodes = new Set(['ENOENT', 'ECONNREFUSED', 'EACCES', 'ECONNRESET', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT']);

/** Whether the error says the engine could not be reached at all (no HTTP answer). */
export function isConnectionError(error: unknown): boolean {
  const e = engineError(error);
  return e.statusCode === undefined && typeof e.code === 'string' && connectionCodes.has(e.code);
}

/** Rethrows connection failures as `DockerUnavailable`; returns other errors unchanged for the caller. */
export function mapConnectionError(error: unknown, docker: Dockerode): unknown {
  if (!isConnectionError(error)) return error;
  const opts = docker.modem as { socketPath?: unknown; host?: unknown; port?: unknown };
  const where = typeof opts.socketPath === 'string' ? opts.socketPath : `${String(opts.host)}:${String(opts.port)}`;
  return new DockerUnavailable(`${engineError(error).code ?? 'error'} reaching ${where}`, { cause: error });
}

/** Output of a short exec collected in memory (helpers, not harness turns). */
export interface QuickExecResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** What `DockerClient.exec` starts: one `docker exec`. */
export interface ExecOptions {
  readonly argv: readonly string[];
  readonly env?: readonly string[];
  readonly user?: string;
  readonly workdir?: string;
  /** Attach stdin (a hijacked, writable connection). */
  readonly stdin?: boolean;
}

/** A started exec: its raw multiplexed stream and a way to read its state. */
export interface StartedExec {
  readonly stream: Duplex;
  inspect(): Promise<Dockerode.ExecInspectInfo>;
}

/** The dockerode calls the provider uses, with engine errors mapped. One per provider. */
export class DockerClient {
  /** Per container: its cgroup on this host (docker-cgroup.ts), or null when the engine's host is not this one. */
  private readonly cgroups = new Map<string, string | null>();

  constructor(readonly docker: Dockerode) {}

  private fail(error: unknown): never {
    throw mapConnectionError(error, this.docker);
  }

  /** Throws `DockerUnavailable` unless the engine answers. */
  async ping(): Promise<void> {
    try {
      await this.docker.ping();
    } catch (error) {
      throw isConnectionError(error) ? this.fail(error) : new DockerUnavailable(engineMessage(error), { cause: error });
    }
  }

  /** The container's state, or `undefined` when there is none by that name or id. */
  async inspect(nameOrId: string): Promise<Dockerode.ContainerInspectInfo | undefined> {
    try {
      return await this.docker.getContainer(nameOrId).inspect();
    } catch (error) {
      if (isNotFound(error)) return undefined;
      return this.fail(error);
    }
  }

  /** Creates a container; returns `'conflict'` when one by that name already exists (a concurrent create). */
  async create(options: Dockerode.ContainerCreateOptions): Promise<string | 'conflict'> {
    try {
      const container = await this.docker.createContainer(options);
      return container.id;
    } catch (error) {
      if (isConflict(error)) return 'conflict';
      if (isNotFound(error) && /no such image/i.test(engineMessage(error))) {
        throw new SandboxImageMissing(options.Image ?? '?', { cause: error });
      }
      return this.fail(error);
    }
  }

  /** Starts a container; already running is fine. */
  async start(nameOrId: string): Promise<void> {
    try {
      await this.docker.getContainer(nameOrId).start();
    } catch (error) {
      if (isNotModified(error)) return;
      if (isNotFound(error)) throw new SandboxContainerGone(nameOrId, engineMessage(error), { cause: error });
      return this.fail(error);
    }
  }

  /** Kills and removes a container; a missing one (or one already being removed) is fine. */
  async remove(nameOrId: string): Promise<boolean> {
    try {
      await this.docker.getContainer(nameOrId).remove({ force: true, v: true });
      return true;
    } catch (error) {
      if (isNotFound(error)) return false;
      // "removal of container ... is already in progress": another caller is ending it.
      if (isConflict(error) && /already in progress/i.test(engineMessage(error))) return false;
      return this.fail(error);
    }
  }

  /** Containers (running or not) carrying all the given labels (`key=value` or `key`). */
  async list(labels: readonly string[]): Promise<Dockerode.ContainerInfo[]> {
    try {
      return await this.docker.listContainers({ all: true, filters: { label: [...labels] } });
    } catch (error) {
      return this.fail(error);
    }
  }

  /** The container's output so far (stdout and stderr, as the engine frames them): for a readiness line. */
  async logs(nameOrId: string): Promise<string> {
    try {
      const out = (await this.docker.getContainer(nameOrId).logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer;
      return Buffer.isBuffer(out) ? out.toString('latin1') : String(out);
    } catch (error) {
      if (isNotFound(error)) throw new SandboxContainerGone(nameOrId, engineMessage(error), { cause: error });
      return this.fail(error);
    }
  }

  /** Whether the engine has a network by this name (`none` and `host` always exist). */
  async hasNetwork(name: string): Promise<boolean> {
    try {
      await this.docker.getNetwork(name).inspect();
      return true;
    } catch (error) {
      if (isNotFound(error)) return false;
      return this.fail(error);
    }
  }

  /** Starts one exec with `Tty: false` (so stdout and stderr arrive multiplexed). */
  async exec(container: string, options: ExecOptions): Promise<StartedExec> {
    let exec: Dockerode.Exec;
    try {
      exec = await this.docker.getContainer(container).exec({
        Cmd: [...options.argv],
        Env: options.env ? [...options.env] : undefined,
        User: options.user,
        WorkingDir: options.workdir,
        AttachStdin: options.stdin === true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
      });
    } catch (error) {
      // 404: no such container; 409: container is not running (or paused / restarting).
      if (isNotFound(error) || isConflict(error)) throw new SandboxContainerGone(container, engineMessage(error), { cause: error });
      return this.fail(error);
    }
    let stream: Duplex;
    try {
      stream = await exec.start({ hijack: true, stdin: options.stdin === true, Tty: false });
    } catch (error) {
      if (isNotFound(error) || isConflict(error)) throw new SandboxContainerGone(container, engineMessage(error), { cause: error });
      return this.fail(error);
    }
    return {
      stream,
      inspect: async () => {
        try {
          return await exec.inspect();
        } catch (error) {
          if (isNotFound(error)) throw new SandboxContainerGone(container, engineMessage(error), { cause: error });
          return this.fail(error);
        }
      },
    };
  }

  /**
   * The container's processes (host pids) with their real, effective and saved uids: from the kernel when the engine
   * runs on this host (its cgroup and /proc, docker-cgroup.ts), else from the engine's `top` (a `ps` the engine runs on
   * its host: no exec in the container). Undefined when the engine cannot say (no `ps` there, an odd answer): the
   * caller then assumes the worst.
   */
  async processes(container: string): Promise<ContainerProcess[] | undefined> {
    const dir = await this.cgroupOf(container);
    const here = dir ? cgroupProcesses(dir) : undefined;
    if (here) return here;
    // Gone from this host's view (stopped, removed): look again next time, and let the engine say what happened.
    if (dir) this.cgroups.delete(container);
    let top: { Titles?: string[]; Processes?: string[][] };
    try {
      top = (await this.docker.getContainer(container).top({ ps_args: '-eo pid,ruid,euid,suid' })) as typeof top;
    } catch (error) {
      if (isNotFound(error) || isConflict(error)) throw new SandboxContainerGone(container, engineMessage(error), { cause: error });
      return undefined;
    }
    const titles = (top.Titles ?? []).map((t) => t.trim().toUpperCase());
    const at = ['PID', 'RUID', 'EUID', 'SUID'].map((t) => titles.indexOf(t));
    if (at.some((i) => i < 0) || !Array.isArray(top.Processes)) return undefined;
    const rows: number[][] = top.Processes.map((row) => at.map((i) => Number(row[i])));
    if (rows.some((row) => row.some((n) => !Number.isInteger(n)))) return undefined;
    return rows.map(([pid, ...uids]) => ({ pid: pid!, uids }));
  }

  /** The container's cgroup directory on this host, found once per container (one inspect); null when not here. */
  private async cgroupOf(container: string): Promise<string | null> {
    const known = this.cgroups.get(container);
    if (known !== undefined) return known;
    const info = await this.inspect(container).catch(() => undefined);
    if (!info?.State?.Running) return null;
    const dir = containerCgroupDir(info.State.Pid, info.Id) ?? null;
    if (this.cgroups.size >= 1024) this.cgroups.clear(); // one entry per container this worker ran: bounded
    this.cgroups.set(container, dir);
    return dir;
  }

  /** Splits a multiplexed exec stream into stdout and stderr streams that end with it. */
  demux(stream: Duplex): { stdout: PassThrough; stderr: PassThrough } {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    this.docker.modem.demuxStream(stream, stdout, stderr);
    const end = (): void => {
      stdout.end();
      stderr.end();
    };
    stream.once('end', end);
    stream.once('close', end);
    stream.once('error', end);
    return { stdout, stderr };
  }

  /** Runs a short command to completion and collects its output (for kills and checks, not turns). */
  async run(container: string, argv: readonly string[], options: Omit<ExecOptions, 'argv' | 'stdin'> = {}): Promise<QuickExecResult> {
    const started = await this.exec(container, { ...options, argv });
    const { stdout, stderr } = this.demux(started.stream);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    stdout.on('data', (chunk: Buffer) => out.push(chunk));
    stderr.on('data', (chunk: Buffer) => err.push(chunk));
    await Promise.all([endOf(stdout), endOf(stderr)]);
    const code = await exitCodeOf(started);
    return { code, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') };
  }
}

function endOf(stream: PassThrough): Promise<void> {
  return new Promise((resolve) => {
    if (stream.readableEnded) resolve();
    stream.once('end', resolve);
    stream.once('close', resolve);
  });
}

/**
 * The exit code of a finished exec. The engine can report `Running` for a moment after the stream ends,
 * so poll briefly; `null` when it never settles.
 */
export async function exitCodeOf(started: StartedExec, waitMs = 2000): Promise<number | null> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const info = await started.inspect();
    if (!info.Running) return info.ExitCode;
    if (Date.now() >= deadline) return null;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
