/**
 * Transition only: READING the stores a CLI keeps in its home from the worker's host (see
 * `DriverTurn.hostWorkspacePath`); homes are written through the sandbox's files (`HarnessDriver.prepare`).
 * The per-run home a CLI driver gives its harness: `<workspace>/.home/<dir>`, never the worker's real home.
 * Config files are written from the worker into the workspace — which the harness can write too — so every
 * write walks from the workspace root without following a link (a link planted in a home is refused, never
 * written through) and the files belong to the workspace's owner. The harness is pointed at the same
 * directory as it sees it.
 */
import path from 'node:path';
import {
  listWorkspaceDirSync,
  readWholeWorkspaceFileSync,
  readWorkspaceFileSync,
  readWorkspaceRangeSync,
  renameWorkspaceEntrySync,
} from '../sandbox/workspace-fs.js';


/** One directory as seen from the worker (`host`) and from inside the sandbox (`sandbox`). */
export interface HarnessHome {
  readonly host: string;
  readonly sandbox: string;
  /** The workspace on the worker's host, and the path below it: writes walk from there. */
  readonly workspace: string;
  readonly rel: string;
}

/** The per-run home for one driver inside the workspace; `undefined` without the host's workspace path. */
export function harnessHome(turn: { readonly workspacePath: string; readonly hostWorkspacePath?: string }, dir: string): HarnessHome | undefined {
  if (turn.hostWorkspacePath === undefined) return undefined;
  const rel = path.posix.join('.home', dir);
  return {
    host: path.join(turn.hostWorkspacePath, rel),
    // The sandbox path uses POSIX separators: it is the path inside the (Linux) sandbox.
    sandbox: path.posix.join(turn.workspacePath, rel),
    workspace: turn.hostWorkspacePath,
    rel,
  };
}

/** A path below a home, on both sides. */
export function homePath(home: HarnessHome, ...segments: string[]): HarnessHome {
  return {
    host: path.join(home.host, ...segments),
    sandbox: path.posix.join(home.sandbox, ...segments),
    workspace: home.workspace,
    rel: path.posix.join(home.rel, ...segments),
  };
}

/** Reads a file below a home without following links; `undefined` when it is absent. */
export function readHomeFile(file: HarnessHome): string | undefined {
  return readWorkspaceFileSync(file.workspace, file.rel)?.toString('utf8');
}

/** Reads a whole file below a home as bytes without following links; `undefined` when absent, an error when too large. */
export function readHomeBytes(file: HarnessHome, maxBytes?: number): Buffer | undefined {
  return readWholeWorkspaceFileSync(file.workspace, file.rel, maxBytes);
}

/** At most `bytes` of a file below a home from byte `offset` on, and the file's size, without following links; `undefined` when absent. */
export function readHomeRange(file: HarnessHome, offset: number, bytes?: number): { data: Buffer; size: number } | undefined {
  return readWorkspaceRangeSync(file.workspace, file.rel, offset, bytes);
}

/** The size of a file below a home, without following links or reading it; `undefined` when absent. */
export function homeFileSize(file: HarnessHome): number | undefined {
  return readWorkspaceRangeSync(file.workspace, file.rel, 0, 0)?.size;
}

/** The first `bytes` bytes of a file below a home (fewer when it is shorter), without following links. */
export function readHomePrefix(file: HarnessHome, bytes: number): Buffer | undefined {
  return readWorkspaceFileSync(file.workspace, file.rel, bytes);
}

/** The entries of a directory below a home, links reported as links; `undefined` when it does not exist. */
export function listHomeDir(dir: HarnessHome): { name: string; type: 'file' | 'directory' | 'symlink' | 'other' }[] | undefined {
  return listWorkspaceDirSync(dir.workspace, dir.rel);
}

/** Renames an entry below a home within its directory, without following links. */
export function renameHomeEntry(entry: HarnessHome, newName: string): void {
  renameWorkspaceEntrySync(entry.workspace, entry.rel, newName);
}
