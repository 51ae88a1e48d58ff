// Workspace file operations that never follow a symbolic link and never check a path before using it.
//
// Every path is relative to the workspace. Each component is opened relative to the directory descriptor
// already held for its parent, through `/proc/self/fd/<fd>/<name>` (the kernel resolves the magic link to the
// open directory itself, not to a path: this is `openat(fd, name)`), with O_NOFOLLOW, and O_DIRECTORY for
// directories. A symlink swapped in at any moment makes that open fail (ELOOP / ENOTDIR) instead of being
// followed; nothing is resolved by path twice. Before data is read or written, the descriptor's own path
// (`readlink /proc/self/fd/<fd>`) must still be inside the workspace, which catches a directory renamed out
// of it mid-walk. Files are opened O_NONBLOCK and must be regular files (no FIFOs, devices or sockets).
//
// Plain JavaScript with Node built-ins only: the same text runs in the worker (local provider) and inside a
// sandbox container as the sandbox user (Docker provider), where `serve()` answers one JSON request per line
// on stdin. See docs/SECURITY.md.
import fs from 'node:fs';
import readline from 'node:readline';

const C = fs.constants;
const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
const READ_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK;
const WRITE_FLAGS = C.O_WRONLY | C.O_NOFOLLOW | C.O_NONBLOCK;

/** A failed workspace operation; `code` is stable, `message` names only workspace-relative paths. */
export class WorkspaceFsError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'WorkspaceFsError';
    this.code = code;
  }
}

const show = (parts) => JSON.stringify(parts.length === 0 ? '.' : parts.join('/'));

/** The lexically normalised components of a workspace-relative path; `[]` is the workspace itself. */
export function pathParts(rel) {
  if (typeof rel !== 'string') throw new WorkspaceFsError('PathEscape', 'A path must be a string.');
  const shown = JSON.stringify(rel);
  if (rel.includes('\0')) throw new WorkspaceFsError('PathEscape', `Path ${shown} contains a NUL byte.`);
  if (rel.startsWith('/')) throw new WorkspaceFsError('PathEscape', `Path ${shown} is absolute; use a path relative to the workspace.`);
  const parts = [];
  for (const part of rel.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      // Lexical: links are never followed, so "a/.." can only mean the directory holding "a".
      if (parts.length === 0) throw new WorkspaceFsError('PathEscape', `Path ${shown} leaves the workspace (".." above its top); use a path inside it.`);
      parts.pop();
      continue;
    }
    parts.push(part);
  }
  return parts;
}

const at = (fd, name) => (name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`);

function close(fd) {
  try {
    fs.closeSync(fd);
  } catch {
    // already closed
  }
}

/** Maps an errno to a WorkspaceFsError about `parts` (never the /proc path the kernel saw). */
function failure(error, parts, wanted) {
  if (error instanceof WorkspaceFsError) return error;
  const where = show(parts);
  switch (error?.code) {
    case 'ELOOP':
      return new WorkspaceFsError('SymlinkRefused', `${where} is a symbolic link; workspace file operations do not follow links.`);
    case 'ENOENT':
      return new WorkspaceFsError('NotFound', `${where} does not exist in the workspace.`);
    case 'ENOTDIR':
      return new WorkspaceFsError('NotADirectory', `${where} is not a directory.`);
    case 'EISDIR':
      return new WorkspaceFsError('IsADirectory', `${where} is a directory${wanted === 'file' ? '; use list_files' : ''}.`);
    case 'EEXIST':
      return new WorkspaceFsError('Exists', `${where} already exists.`);
    case 'EACCES':
    case 'EPERM':
      return new WorkspaceFsError('PermissionDenied', `${where}: permission denied.`);
    case 'ENXIO':
      return new WorkspaceFsError('NotAFile', `${where} is not a regular file.`);
    default:
      return new WorkspaceFsError('Io', `${where}: ${error?.code ?? 'error'}.`);
  }
}

/**
 * Opens the workspace root. The root's own path is the caller's (trusted); its last component must still be
 * a real directory, not a link.
 */
export function openWorkspace(root) {
  let fd;
  try {
    fd = fs.openSync(root, DIR_FLAGS);
  } catch (error) {
    if (error?.code === 'ENOENT') throw new WorkspaceFsError('NotFound', 'The workspace does not exist; the sandbox must be started first.');
    if (error?.code === 'ELOOP' || error?.code === 'ENOTDIR') throw new WorkspaceFsError('SymlinkRefused', 'The workspace is not a directory.');
    throw new WorkspaceFsError('Io', `The workspace cannot be opened (${error?.code ?? 'error'}).`);
  }
  let real;
  try {
    real = fs.readlinkSync(at(fd));
  } catch {
    close(fd);
    throw new WorkspaceFsError('Io', 'The workspace cannot be resolved: /proc is not mounted.');
  }
  const st = fs.fstatSync(fd);
  return { fd, real, uid: st.uid, gid: st.gid, close: () => close(fd) };
}

/** As root, files the runtime creates belong to the workspace's owner (the sandbox user), never to root. */
function inheritOwner(ws, fd) {
  if (typeof process.geteuid === 'function' && process.geteuid() === 0 && (ws.uid !== 0 || ws.gid !== 0)) {
    fs.fchownSync(fd, ws.uid, ws.gid);
  }
}

/** Refuses a descriptor whose directory was moved out of the workspace while we held it. */
function checkInside(ws, fd, parts) {
  const now = fs.readlinkSync(at(fd));
  if (now !== ws.real && !now.startsWith(`${ws.real}/`)) {
    throw new WorkspaceFsError('PathEscape', `${show(parts)} was moved outside the workspace while in use; refusing it.`);
  }
}

/**
 * The directory at `parts` (each component opened O_NOFOLLOW|O_DIRECTORY relative to its parent's
 * descriptor), created on the way when `create`. Returns a descriptor the caller closes.
 */
function walkDir(ws, parts, create) {
  // A second descriptor for the root: its /proc magic link is ours to follow (O_NOFOLLOW would refuse it).
  let fd = fs.openSync(at(ws.fd), C.O_RDONLY | C.O_DIRECTORY);
  for (let i = 0; i < parts.length; i += 1) {
    const name = parts[i];
    let next;
    try {
      next = fs.openSync(at(fd, name), DIR_FLAGS);
    } catch (error) {
      if (error?.code !== 'ENOENT' || !create) {
        const isLink = error?.code === 'ENOTDIR' && isSymlinkAt(fd, name);
        close(fd);
        throw failure(isLink ? { code: 'ELOOP' } : error, parts.slice(0, i + 1), 'dir');
      }
      try {
        // mkdir never follows a link in its last component: an existing link gives EEXIST, then ELOOP below.
        fs.mkdirSync(at(fd, name), { mode: 0o755 });
      } catch (mkdirError) {
        if (mkdirError?.code !== 'EEXIST') {
          close(fd);
          throw failure(mkdirError, parts.slice(0, i + 1), 'dir');
        }
      }
      try {
        next = fs.openSync(at(fd, name), DIR_FLAGS);
        inheritOwner(ws, next);
      } catch (openError) {
        close(fd);
        throw failure(openError, parts.slice(0, i + 1), 'dir');
      }
    }
    close(fd);
    fd = next;
  }
  return fd;
}

/** Whether `name` in directory `fd` is a link (O_DIRECTORY|O_NOFOLLOW reports a link as ENOTDIR). */
function isSymlinkAt(fd, name) {
  try {
    return fs.lstatSync(at(fd, name)).isSymbolicLink();
  } catch {
    return false;
  }
}

const typeOf = (st) => (st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other');

function splitLast(rel, what) {
  const parts = pathParts(rel);
  if (parts.length === 0) throw new WorkspaceFsError('IsADirectory', `${show(parts)} is the workspace itself, not a ${what}.`);
  return { parts, dirParts: parts.slice(0, -1), name: parts[parts.length - 1] };
}

/**
 * Runs `fn` on directory `dir` once it is checked to be inside the workspace; its failures are named after
 * `parts` (as a `kind`), and `dir` is closed after, whatever happens.
 */
function inDir(ws, dir, parts, kind, fn) {
  try {
    checkInside(ws, dir, parts);
    return fn();
  } catch (error) {
    throw failure(error, parts, kind);
  } finally {
    close(dir);
  }
}

/** `{ type, size }` of the entry (a link is reported as `symlink`, not followed); `undefined` if absent. */
export function statAt(ws, rel) {
  const parts = pathParts(rel);
  if (parts.length === 0) {
    const st = fs.fstatSync(ws.fd);
    return { type: typeOf(st), size: st.size };
  }
  let dir;
  try {
    dir = walkDir(ws, parts.slice(0, -1), false);
  } catch (error) {
    if (error instanceof WorkspaceFsError && error.code === 'NotFound') return undefined;
    throw error;
  }
  try {
    checkInside(ws, dir, parts);
    const st = fs.lstatSync(at(dir, parts[parts.length - 1]));
    return { type: typeOf(st), size: st.size };
  } catch (error) {
    if (error?.code === 'ENOENT') return undefined;
    throw failure(error, parts, 'any');
  } finally {
    close(dir);
  }
}

/** Reads at most `maxBytes` of a regular file from byte `offset` on: `{ data, size }` (size is the whole file's). */
export function readAt(ws, rel, maxBytes, offset = 0) {
  const { parts, dirParts, name } = splitLast(rel, 'file');
  const dir = walkDir(ws, dirParts, false);
  let fd;
  try {
    fd = fs.openSync(at(dir, name), READ_FLAGS);
  } catch (error) {
    throw failure(error, parts, 'file');
  } finally {
    close(dir);
  }
  try {
    const st = fs.fstatSync(fd);
    if (st.isDirectory()) throw failure({ code: 'EISDIR' }, parts, 'file');
    if (!st.isFile()) throw failure({ code: 'ENXIO' }, parts, 'file');
    checkInside(ws, fd, parts);
    const from = Math.max(0, Math.min(offset, st.size));
    const limit = Math.max(0, Math.min(maxBytes, st.size - from));
    const data = Buffer.alloc(limit);
    let read = 0;
    while (read < limit) {
      const n = fs.readSync(fd, data, read, limit - read, from + read);
      if (n === 0) break;
      read += n;
    }
    return { data: data.subarray(0, read), size: st.size };
  } catch (error) {
    throw failure(error, parts, 'file');
  } finally {
    close(fd);
  }
}

/** Writes (replaces) a regular file, creating it and, with `createParents`, its directories. */
export function writeAt(ws, rel, data, options = {}) {
  const { parts, dirParts, name } = splitLast(rel, 'file');
  const dir = walkDir(ws, dirParts, options.createParents === true);
  let fd;
  let created = false;
  inDir(ws, dir, parts, 'file', () => {
    try {
      fd = fs.openSync(at(dir, name), WRITE_FLAGS | C.O_CREAT | C.O_EXCL, options.mode ?? 0o644);
      created = true;
    } catch (error) {
      if (error?.code !== 'EEXIST') throw error;
      fd = fs.openSync(at(dir, name), WRITE_FLAGS);
    }
  });
  try {
    const st = fs.fstatSync(fd);
    // Type first, truncate after: a FIFO or device is refused before anything happens to it.
    if (!st.isFile()) throw failure({ code: 'ENXIO' }, parts, 'file');
    if (created) inheritOwner(ws, fd);
    fs.ftruncateSync(fd, 0);
    const buffer = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    let written = 0;
    while (written < buffer.length) written += fs.writeSync(fd, buffer, written, buffer.length - written, written);
    return { bytes: buffer.length };
  } catch (error) {
    throw failure(error, parts, 'file');
  } finally {
    close(fd);
  }
}

/** The entries of a directory, sorted by name, each with its type (links reported, never followed). */
export function listAt(ws, rel) {
  const parts = pathParts(rel);
  const dir = walkDir(ws, parts, false);
  return inDir(ws, dir, parts, 'dir', () =>
    fs
      .readdirSync(at(dir), { withFileTypes: true })
      .map((entry) => ({ name: entry.name, type: typeOf(entry) }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
  );
}

/** Creates a directory; `recursive` creates missing parents and accepts an existing directory. */
export function mkdirAt(ws, rel, options = {}) {
  const parts = pathParts(rel);
  if (options.recursive) {
    close(walkDir(ws, parts, true));
    return;
  }
  const { dirParts, name } = splitLast(rel, 'directory');
  const dir = walkDir(ws, dirParts, false);
  inDir(ws, dir, parts, 'dir', () => {
    fs.mkdirSync(at(dir, name), { mode: 0o755 });
    const fd = fs.openSync(at(dir, name), DIR_FLAGS);
    try {
      inheritOwner(ws, fd);
    } finally {
      close(fd);
    }
  });
}

/**
 * Renames the entry `rel` to `newName` in the same directory (a name, not a path). The entry itself is moved
 * (a link stays a link: rename never follows its last component); an existing `newName` is replaced.
 */
export function renameAt(ws, rel, newName) {
  const { parts, dirParts, name } = splitLast(rel, 'entry');
  if (typeof newName !== 'string' || newName === '' || newName === '.' || newName === '..' || newName.includes('/') || newName.includes('\0')) {
    throw new WorkspaceFsError('PathEscape', `${JSON.stringify(String(newName))} is not a plain name; a rename stays in its directory.`);
  }
  const dir = walkDir(ws, dirParts, false);
  inDir(ws, dir, parts, 'any', () => fs.renameSync(at(dir, name), at(dir, newName)));
}

/** Runs one request against the workspace at `root`; the shape `serve()` speaks. */
export function handle(root, request) {
  const ws = openWorkspace(root);
  try {
    switch (request.op) {
      case 'stat':
        return statAt(ws, request.path) ?? null;
      case 'read': {
        if (!Number.isInteger(request.maxBytes) || request.maxBytes < 0) throw new WorkspaceFsError('Io', 'maxBytes must be a non-negative integer.');
        const { data, size } = readAt(ws, request.path, request.maxBytes);
        return { data: data.toString('base64'), size };
      }
      case 'write':
        return writeAt(ws, request.path, Buffer.from(request.data, 'base64'), { createParents: request.createParents, mode: request.mode });
      case 'list':
        return listAt(ws, request.path);
      case 'mkdir':
        mkdirAt(ws, request.path, { recursive: request.recursive });
        return null;
      default:
        throw new WorkspaceFsError('Io', `Unknown operation ${JSON.stringify(request.op)}.`);
    }
  } finally {
    ws.close();
  }
}

/** Answers `{id, op, path, ...}` lines on stdin with `{id, ok, result | error}` lines on stdout until stdin ends. */
export function serve(root) {
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  lines.on('line', (line) => {
    let id = null;
    let reply;
    try {
      const request = JSON.parse(line);
      id = request.id ?? null;
      reply = { id, ok: true, result: handle(root, request) };
    } catch (error) {
      const code = error instanceof WorkspaceFsError ? error.code : 'Io';
      const message = error instanceof WorkspaceFsError ? error.message : `helper error: ${error?.code ?? error?.name ?? 'unknown'}`;
      reply = { id, ok: false, error: { code, message } };
    }
    process.stdout.write(`${JSON.stringify(reply)}\n`);
  });
}
