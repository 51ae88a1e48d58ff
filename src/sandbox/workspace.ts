/** Workspace paths: which directory a scope maps to, and keeping paths inside it. */
import { lstatSync, realpathSync } from 'node:fs';
import path from 'node:path';
import type { SandboxStartRequest, WorkspaceScope } from './types.js';

const maxSegmentLength = 200;
const allowedCharacters = 'letters, digits, and - _ . @ : + = , (and no "/", "\\", NUL, "." or "..")';

/**
 * Validates one id used as a directory name (workflow id, agent, tenant, user) and returns it.
 * Ids come from callers and catalogs; one with a separator or `..` would put a workspace anywhere on disk.
 */
export function safeSegment(id: string, what = 'id'): string {
  const problem = segmentProblem(id);
  if (problem) {
    throw new Error(`Invalid ${what} ${JSON.stringify(id)}: ${problem}. Allowed: ${allowedCharacters}, at most ${maxSegmentLength} characters.`);
  }
  return id;
}

function segmentProblem(id: string): string | undefined {
  if (id.length === 0) return 'it is empty';
  if (id.length > maxSegmentLength) return `it is ${id.length} characters long`;
  if (id === '.' || id === '..') return 'it is a relative directory name';
  if (id.includes('\0')) return 'it contains a NUL byte';
  if (id.includes('/') || id.includes('\\')) return 'it contains a path separator';
  if (path.isAbsolute(id) || path.win32.isAbsolute(id)) return 'it is an absolute path';
  // Control characters and other oddities make directory names unreadable in listings and logs.
  if (!/^[A-Za-z0-9._@:+=,-]+$/.test(id)) return 'it contains a character outside the allowed set';
  return undefined;
}

/** The workspace directory (absolute) for a scope, below `root`. */
export function workspaceDirFor(root: string, scope: WorkspaceScope, request: Pick<SandboxStartRequest, 'workflowId' | 'agent' | 'identity'>): string {
  const base = path.resolve(root);
  switch (scope) {
    case 'run':
      return path.join(base, 'runs', safeSegment(request.workflowId, 'workflow id'));
    case 'agent':
      return path.join(base, 'agents', safeSegment(request.agent, 'agent name'));
    case 'agent-user':
      return path.join(
        base,
        'agents',
        safeSegment(request.agent, 'agent name'),
        'users',
        safeSegment(request.identity.tenantId, 'tenant id'),
        safeSegment(request.identity.userId, 'user id'),
      );
    case 'parent':
      // The runtime hands a sub-agent its parent's sandbox; no provider creates a workspace for this scope.
      throw new Error('Workspace scope "parent" has no directory of its own: it is the parent run\'s workspace, handed over by the runtime.');
    default: {
      const never: never = scope;
      throw new Error(`Unknown workspace scope ${JSON.stringify(never)}; use run, agent or agent-user.`);
    }
  }
}

/** Raised when a requested path would leave its directory (the workspace), lexically or through a symlink. */
export class PathEscapeError extends Error {
  override readonly name = 'PathEscapeError';
  readonly code = 'PathEscape' as const;
}

export interface ResolveInsideOptions {
  /** Throw (a plain Error, not PathEscapeError) unless `root` exists: actions run only in a started sandbox. */
  readonly requireRoot?: boolean;
}

function isInside(root: string, candidate: string): boolean {
  const rel = path.relative(root, candidate);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function realOrSelf(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

/** Splits `target` into its nearest existing ancestor (or itself) and the parts below it that do not exist yet. */
function existingPrefix(target: string): { existing: string; rest: string[] } {
  const rest: string[] = [];
  let current = target;
  for (;;) {
    try {
      lstatSync(current);
      return { existing: current, rest };
    } catch {
      const parent = path.dirname(current);
      if (parent === current) return { existing: current, rest };
      rest.unshift(path.basename(current));
      current = parent;
    }
  }
}

/**
 * Resolves `relativePath` inside `root` and returns the absolute path; throws PathEscapeError if it contains a NUL
 * byte, is absolute, escapes lexically (`..`), or escapes through a symlink in any existing part of the path
 * (including the target itself, and a dangling symlink, which a write would follow to anywhere).
 */
export function resolveInside(root: string, relativePath: string, options: ResolveInsideOptions = {}): string {
  const shown = JSON.stringify(relativePath);
  if (relativePath.includes('\0')) throw new PathEscapeError(`Path ${shown} contains a NUL byte.`);
  const base = path.resolve(root);
  if (path.isAbsolute(relativePath)) {
    throw new PathEscapeError(`Path ${shown} is absolute and escapes the directory ${base}; use a path relative to it.`);
  }
  const resolved = path.resolve(base, relativePath);
  if (!isInside(base, resolved)) {
    throw new PathEscapeError(`Path ${shown} leaves the workspace: it escapes the directory ${base}; use a path inside it (no "..").`);
  }
  let realBase: string;
  if (options.requireRoot) {
    try {
      realBase = realpathSync(base);
    } catch {
      throw new Error(`Workspace ${base} does not exist; the sandbox must be started before actions run.`);
    }
  } else {
    realBase = realOrSelf(base);
  }
  const { existing, rest } = existingPrefix(resolved);
  let realExisting: string;
  try {
    realExisting = realpathSync(existing);
  } catch {
    // lstat saw it but realpath cannot follow it: a dangling symlink, whose target we cannot check.
    throw new PathEscapeError(`Path ${shown} goes through a broken symlink (${existing}): a symbolic link whose target does not exist; refusing it.`);
  }
  const real = path.join(realExisting, ...rest);
  if (!isInside(realBase, real)) {
    throw new PathEscapeError(`Path ${shown} leads outside the workspace through a symbolic link: the symlink resolves to ${real}, outside ${base}.`);
  }
  return resolved;
}
