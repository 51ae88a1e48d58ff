/**
 * The per-run home a CLI adapter gives its harness: `<workspace>/.home/<dir>`, never the worker's real home.
 * Config files are written from the worker into the workspace — which the harness can write too — so every
 * write walks from the workspace root without following a link (a link planted in a home is refused, never
 * written through) and the files belong to the workspace's owner. The harness is pointed at the same
 * directory as it sees it.
 */
import path from 'node:path';
import {
  listWorkspaceDirSync,
  mkdirWorkspaceSync,
  readWholeWorkspaceFileSync,
  readWorkspaceFileSync,
  readWorkspaceRangeSync,
  renameWorkspaceEntrySync,
  writeWorkspaceFileSync,
} from '../sandbox/workspace-fs.js';
import type { HarnessSessionConfig } from './types.js';

/** One directory as seen from the worker (`host`) and from inside the sandbox (`sandbox`). */
export interface HarnessHome {
  readonly host: string;
  readonly sandbox: string;
  /** The workspace on the worker's host, and the path below it: writes walk from there. */
  readonly workspace: string;
  readonly rel: string;
}

/** The per-run home for one driver inside the workspace. */
export function harnessHome(config: HarnessSessionConfig, dir: string): HarnessHome {
  const rel = path.posix.join('.home', dir);
  return {
    host: path.join(config.hostWorkspacePath, rel),
    // The sandbox path uses POSIX separators: it is the path inside the (Linux) sandbox.
    sandbox: path.posix.join(config.workspacePath, rel),
    workspace: config.hostWorkspacePath,
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

/** Writes a file below a home (creating directories) without following links; private to the run's user. */
export function writeHomeFile(file: HarnessHome, content: string): void {
  writeWorkspaceFileSync(file.workspace, file.rel, content, { createParents: true, mode: 0o600 });
}

/** Creates a directory below a home without following links. */
export function makeHomeDir(dir: HarnessHome): void {
  mkdirWorkspaceSync(dir.workspace, dir.rel);
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

/** A string setting from the catalog's driver-specific `settings`, if present. */
export function stringSetting(config: HarnessSessionConfig, key: string): string | undefined {
  const value = config.settings?.[key];
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/** A numeric setting from the catalog's driver-specific `settings`, if present. */
export function numberSetting(config: HarnessSessionConfig, key: string): number | undefined {
  const value = config.settings?.[key];
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/** Parses one line as JSON; `undefined` when it is not JSON (the caller maps it to an `unknown` event). */
export function parseJsonLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}
