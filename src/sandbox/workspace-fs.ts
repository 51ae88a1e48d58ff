/**
 * Workspace file access without following links: typed errors, the local provider's `SandboxFs`, synchronous
 * writes for files the runtime itself puts in a workspace (adapter homes), and the helper's source for
 * running it inside a container. The walk itself is in fs-helper.mjs (one implementation for both places).
 */
import { closeSync, constants, fchmodSync, fchownSync, openSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as helper from './fs-helper.mjs';
import type { SandboxEntryType, SandboxFs } from './types.js';

/** Stable codes of `SandboxFsError`. */
export type SandboxFsErrorCode = helper.WorkspaceFsErrorCode;

/** A workspace file operation that failed; the message names the workspace-relative path only. */
export class SandboxFsError extends Error {
  override readonly name: string = 'SandboxFsError';
  constructor(
    readonly code: SandboxFsErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** Raised when a path would leave the workspace: absolute, `..` above its top, or moved out mid-operation. */
export class PathEscapeError extends SandboxFsError {
  override readonly name = 'PathEscapeError';
  constructor(message: string) {
    super('PathEscape', message);
  }
}

/** Default and ceiling of one read. */
export const maxReadBytes = 16 * 1024 * 1024;

/** The typed error for a code and message (from the helper, in process or over the wire). */
export function sandboxFsError(code: string, message: string): SandboxFsError {
  if (code === 'PathEscape') return new PathEscapeError(message);
  const known: readonly string[] = ['SymlinkRefused', 'NotFound', 'NotADirectory', 'IsADirectory', 'NotAFile', 'Exists', 'PermissionDenied', 'Io'];
  return new SandboxFsError((known.includes(code) ? code : 'Io') as SandboxFsErrorCode, message);
}

function mapped(error: unknown): SandboxFsError {
  if (error instanceof helper.WorkspaceFsError) return sandboxFsError(error.code, error.message);
  // Anything else is unexpected; keep host paths out of the message all the same.
  return new SandboxFsError('Io', `workspace operation failed (${(error as { code?: string }).code ?? (error as Error).name ?? 'error'})`);
}

function withWorkspace<T>(root: string, fn: (ws: helper.OpenWorkspace) => T): T {
  let ws: helper.OpenWorkspace | undefined;
  try {
    ws = helper.openWorkspace(root);
    return fn(ws);
  } catch (error) {
    throw mapped(error);
  } finally {
    ws?.close();
  }
}

function readLimit(maxBytes: number | undefined): number {
  if (maxBytes === undefined) return maxReadBytes;
  if (!Number.isInteger(maxBytes) || maxBytes < 0) throw new SandboxFsError('Io', `maxBytes must be a non-negative integer, not ${maxBytes}.`);
  return Math.min(maxBytes, maxReadBytes);
}

/** Writes a file below `root` without following links (runtime-written files such as adapter configs). */
export function writeWorkspaceFileSync(root: string, rel: string, data: string | Uint8Array, options: { createParents?: boolean; mode?: number } = {}): number {
  return withWorkspace(root, (ws) => helper.writeAt(ws, rel, data, options).bytes);
}

/** Reads a file below `root` without following links; `undefined` when it does not exist. */
export function readWorkspaceFileSync(root: string, rel: string, maxBytes = maxReadBytes): Buffer | undefined {
  return readWorkspaceRangeSync(root, rel, 0, maxBytes)?.data;
}

/**
 * Reads a whole file below `root` without following links; `undefined` when it does not exist. A file larger
 * than `maxBytes` is an error, never a silently cut copy.
 */
export function readWholeWorkspaceFileSync(root: string, rel: string, maxBytes = maxReadBytes): Buffer | undefined {
  try {
    return withWorkspace(root, (ws) => {
      const { data, size } = helper.readAt(ws, rel, readLimit(maxBytes));
      if (data.length !== size) throw new helper.WorkspaceFsError('Io', `${JSON.stringify(rel)} is larger than ${maxBytes} bytes.`);
      return data;
    });
  } catch (error) {
    if (error instanceof SandboxFsError && error.code === 'NotFound') return undefined;
    throw error;
  }
}

/**
 * Reads at most `maxBytes` of a file below `root` from byte `offset` on, without following links, with the whole
 * file's size; `undefined` when it does not exist.
 */
export function readWorkspaceRangeSync(root: string, rel: string, offset: number, maxBytes = maxReadBytes): { data: Buffer; size: number } | undefined {
  try {
    return withWorkspace(root, (ws) => helper.readAt(ws, rel, readLimit(maxBytes), offset));
  } catch (error) {
    if (error instanceof SandboxFsError && error.code === 'NotFound') return undefined;
    throw error;
  }
}

/** The entries of a directory below `root` (links reported as links); `undefined` when it does not exist. */
export function listWorkspaceDirSync(root: string, rel: string): { name: string; type: SandboxEntryType }[] | undefined {
  try {
    return withWorkspace(root, (ws) => helper.listAt(ws, rel));
  } catch (error) {
    if (error instanceof SandboxFsError && error.code === 'NotFound') return undefined;
    throw error;
  }
}

/** Renames an entry below `root` within its directory, without following links. */
export function renameWorkspaceEntrySync(root: string, rel: string, newName: string): void {
  withWorkspace(root, (ws) => helper.renameAt(ws, rel, newName));
}

/** Creates a directory (and its parents) below `root` without following links. */
export function mkdirWorkspaceSync(root: string, rel: string): void {
  withWorkspace(root, (ws) => helper.mkdirAt(ws, rel, { recursive: true }));
}

/**
 * `SandboxFs` on the worker's host (local provider). Each call opens the workspace root and walks from its
 * descriptor; as root, created files and directories are given to the workspace's owner.
 */
export class LocalWorkspaceFs implements SandboxFs {
  constructor(private readonly root: string) {}

  async stat(rel: string): Promise<{ type: SandboxEntryType; size: number } | undefined> {
    return withWorkspace(this.root, (ws) => helper.statAt(ws, rel));
  }

  async readFile(rel: string, options: { maxBytes?: number } = {}): Promise<{ data: Buffer; size: number }> {
    const limit = readLimit(options.maxBytes);
    return withWorkspace(this.root, (ws) => helper.readAt(ws, rel, limit));
  }

  async writeFile(rel: string, data: string | Uint8Array, options: { createParents?: boolean; mode?: number } = {}): Promise<{ bytes: number }> {
    return withWorkspace(this.root, (ws) => helper.writeAt(ws, rel, data, options));
  }

  async list(rel: string): Promise<{ name: string; type: SandboxEntryType }[]> {
    return withWorkspace(this.root, (ws) => helper.listAt(ws, rel));
  }

  async mkdir(rel: string, options: { recursive?: boolean } = {}): Promise<void> {
    withWorkspace(this.root, (ws) => helper.mkdirAt(ws, rel, options));
  }
}

/**
 * Gives the directory `dir` (not its contents) to `uid:gid`, optionally with `mode`, through a descriptor
 * opened without following a link: a link planted in its place is refused, never chowned through.
 */
export function chownDirectoryNoFollow(dir: string, uid: number, gid: number, mode?: number): void {
  const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  try {
    fchownSync(fd, uid, gid);
    if (mode !== undefined) fchmodSync(fd, mode);
  } finally {
    closeSync(fd);
  }
}

/** Sets the mode of the directory `dir` (not its contents) through a descriptor that refuses a link. */
export function chmodDirectoryNoFollow(dir: string, mode: number): void {
  const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  try {
    fchmodSync(fd, mode);
  } finally {
    closeSync(fd);
  }
}

let source: string | undefined;

/** The helper as one script for `node --input-type=module -e`: it serves the workspace named by argv[1]. */
export function fsHelperScript(): string {
  source ??= readFileSync(fileURLToPath(new URL('./fs-helper.mjs', import.meta.url)), 'utf8');
  return `${source}\nserve(process.argv[1]);\n`;
}
