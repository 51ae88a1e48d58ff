/** Keeps action paths inside the workspace, lexically and through symlinks. */
import { realpath, lstat } from 'node:fs/promises';
import path from 'node:path';

/** Raised when a requested path would leave the workspace. */
export class PathEscapeError extends Error {
  override readonly name = 'PathEscapeError';
  readonly code = 'PathEscape' as const;
}

function isInside(root: string, candidate: string): boolean {
  const rel = path.relative(root, candidate);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** Resolves `rel` against `root` without touching the disk; throws PathEscapeError for absolute paths or `..` escapes. */
export function resolveInside(root: string, rel: string): string {
  if (rel.includes('\0')) throw new PathEscapeError(`path "${rel}" contains a NUL byte`);
  if (path.isAbsolute(rel)) {
    throw new PathEscapeError(`path "${rel}" is absolute; use a path relative to the workspace root`);
  }
  const base = path.resolve(root);
  const resolved = path.resolve(base, rel);
  if (!isInside(base, resolved)) {
    throw new PathEscapeError(`path "${rel}" leaves the workspace; use a path inside it (no "..")`);
  }
  return resolved;
}

async function exists(p: string): Promise<boolean> {
  try {
    await lstat(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * Like resolveInside, but also follows symlinks: the nearest existing ancestor (and the target, if it exists)
 * must really live inside the workspace, so a symlink pointing out cannot be used to read or write elsewhere.
 */
export async function resolveInsideReal(root: string, rel: string): Promise<string> {
  const resolved = resolveInside(root, rel);
  let realRoot: string;
  try {
    realRoot = await realpath(path.resolve(root));
  } catch {
    throw new Error(`workspace ${root} does not exist; the sandbox must be started before actions run`);
  }
  let probe = resolved;
  while (!(await exists(probe))) {
    const parent = path.dirname(probe);
    if (parent === probe) break;
    probe = parent;
  }
  let realProbe: string;
  try {
    realProbe = await realpath(probe);
  } catch {
    // A dangling symlink would be followed by a write, possibly to anywhere.
    throw new PathEscapeError(`path "${rel}" is a symbolic link whose target does not exist`);
  }
  if (!isInside(realRoot, realProbe)) {
    throw new PathEscapeError(`path "${rel}" leads outside the workspace through a symbolic link`);
  }
  return resolved;
}
