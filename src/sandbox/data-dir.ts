/**
 * The worker's data directory is private to the worker: Temporal's database (`temporal.db`: every run's task and
 * result), the ledger, credentials, runtime state and other runs' workspaces must not be readable by a harness that
 * runs as a sandbox user (`sandbox.options.user`, or a uid from `sandbox.options.userRange`).
 *
 * Directories a sandbox user must pass through to reach its own workspace are `0711` (enter by name, never list);
 * every other directory is `0700` and every file `0600`. A workspace itself belongs to the uid that works in it and is
 * `0700`. Existing data directories made by older versions (0755 directories, 0644 files) are tightened at worker
 * start; SQLite gives the WAL and shared-memory files it creates later the mode of the database file.
 */
import { chmodSync, lstatSync, mkdirSync, readdirSync, type Stats } from 'node:fs';
import path from 'node:path';

/** Enter by name, never list: the directories on a sandbox user's way to its own workspace. */
export const traverseOnlyMode = 0o711;

/** The workspace layout's scope directories and how deep each holds directories on the way (see workspace.ts). */
const scopeDepth: Readonly<Record<string, number>> = { runs: 0, agents: 0, 'agent-users': 2 };

const isRoot = (): boolean => typeof process.geteuid === 'function' && process.geteuid() === 0;

/** What `protectDataDir` changed: paths and their old and new modes, for the worker's log. */
export interface ProtectedChange {
  readonly path: string;
  readonly from: number;
  readonly to: number;
}

/**
 * Makes `dataDir` readable by the worker only, as described above; `workspaceRoots` (default
 * `<dataDir>/workspaces`) get the traverse-only layout. Never follows a link: a link is left alone (a harness
 * cannot plant one there: it never gets write access above its workspace). Never opens a file (see `setMode`).
 * Returns what it changed.
 */
export function protectDataDir(dataDir: string, workspaceRoots: readonly string[] = [path.join(dataDir, 'workspaces')]): ProtectedChange[] {
  const root = path.resolve(dataDir);
  mkdirSync(root, { recursive: true });
  const changes: ProtectedChange[] = [];
  const roots = new Set(workspaceRoots.map((r) => path.resolve(r)));
  setMode(root, traverseOnlyMode, changes);
  for (const name of safeReaddir(root)) {
    const entry = path.join(root, name);
    const stat = lstatOrUndefined(entry);
    if (!stat || stat.isSymbolicLink()) continue;
    if (stat.isFile()) setMode(entry, 0o600, changes);
    else if (stat.isDirectory() && !roots.has(entry)) setMode(entry, 0o700, changes);
  }
  for (const workspaces of roots) protectWorkspaceRoot(workspaces, changes);
  return changes;
}

/** A workspace root: traverse-only down to the workspaces, which are private to their owner. */
export function protectWorkspaceRoot(root: string, changes: ProtectedChange[] = []): ProtectedChange[] {
  if (!lstatOrUndefined(root)?.isDirectory()) return changes;
  setMode(root, traverseOnlyMode, changes);
  for (const scope of safeReaddir(root)) {
    const depth = scopeDepth[scope];
    const dir = path.join(root, scope);
    if (depth === undefined || !lstatOrUndefined(dir)?.isDirectory()) continue;
    walkScope(dir, depth, changes);
  }
  return changes;
}

function walkScope(dir: string, depth: number, changes: ProtectedChange[]): void {
  setMode(dir, traverseOnlyMode, changes);
  for (const name of safeReaddir(dir)) {
    const child = path.join(dir, name);
    const stat = lstatOrUndefined(child);
    if (!stat?.isDirectory()) continue;
    if (depth > 0) walkScope(child, depth - 1, changes);
    else protectWorkspace(child, stat, changes);
  }
}

/**
 * One workspace: no access for group and others. Skipped when the worker is not root and the directory is open to
 * all (the Docker provider's fallback for a worker that cannot give the workspace to the container user).
 */
function protectWorkspace(dir: string, stat: Stats, changes: ProtectedChange[]): void {
  const mode = stat.mode & 0o7777;
  if (!isRoot() && (mode & 0o777) === 0o777) return;
  setMode(dir, mode & ~0o077, changes);
}

/** The directories between `root` and the workspace `dir` (both excluded) become traverse-only. */
export function protectWorkspacePath(root: string, dir: string): void {
  const rel = path.relative(root, dir).split(path.sep).slice(0, -1);
  let current = root;
  setMode(current, traverseOnlyMode, []);
  for (const part of rel) {
    current = path.join(current, part);
    setMode(current, traverseOnlyMode, []);
  }
}

/**
 * Sets the mode of `file` unless it is a link. By path, after an lstat, never through a descriptor: closing any
 * descriptor of a file drops every POSIX lock this process holds on it, and the worker holds SQLite's locks on the
 * ledger (a probe that opened it broke the ledger with "disk I/O error"). Only the worker writes these directories,
 * so nothing can swap a link in between. Records a change.
 */
function setMode(file: string, mode: number, changes: ProtectedChange[]): void {
  const stat = lstatOrUndefined(file);
  if (!stat || stat.isSymbolicLink() || !(stat.isFile() || stat.isDirectory())) return;
  const from = stat.mode & 0o7777;
  if (from === mode) return;
  try {
    chmodSync(file, mode);
    changes.push({ path: file, from, to: mode });
  } catch {
    // gone meanwhile, or not ours to change (a non-root worker and a sandbox user's directory)
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function lstatOrUndefined(file: string): Stats | undefined {
  try {
    return lstatSync(file);
  } catch {
    return undefined;
  }
}
