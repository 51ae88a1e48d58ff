/** Built-in actions: small, workspace-confined file operations and an echo. */
import { mkdir, readFile, readdir, writeFile, stat, open } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { resolveInside } from '../sandbox/workspace.js';
import type { ActionContext, ActionDefinition } from './types.js';
import { ActionRegistry } from './registry.js';

/** Default read limit: large enough for source files, small enough to keep turn input sane. */
export const DEFAULT_MAX_READ_BYTES = 64 * 1024;

/** Directory names that hold harness or runtime state, not the agent's work. */
const HIDDEN_STATE_DIRS: ReadonlySet<string> = new Set(['.home', '.durable-harness', '.claude', '.codex', '.gemini', '.opencode', '.pi', '.config', '.cache', '.npm']);

const writeFileParams = z.strictObject({
  path: z.string().min(1).describe('File path relative to the workspace root'),
  content: z.string().describe('Full new content of the file (UTF-8)'),
});

const readFileParams = z.strictObject({
  path: z.string().min(1).describe('File path relative to the workspace root'),
  maxBytes: z.number().int().positive().optional().describe(`Read at most this many bytes (default ${DEFAULT_MAX_READ_BYTES})`),
});

const listFilesParams = z.strictObject({
  path: z.string().min(1).default('.').describe('Directory relative to the workspace root (default ".")'),
});

const echoParams = z.strictObject({
  text: z.string().describe('Text to echo back'),
});

/** `rel` resolved inside the (existing) workspace; PathEscapeError if it leaves it, also through a symlink. */
function inWorkspace(ctx: ActionContext, rel: string): string {
  return resolveInside(ctx.hostWorkspacePath, rel, { requireRoot: true });
}

/** write_file: creates parent directories; the path must stay inside the workspace. */
export const writeFileAction: ActionDefinition<z.infer<typeof writeFileParams>> = {
  name: 'write_file',
  description: 'Write a UTF-8 text file in the workspace, creating parent directories.',
  parameters: writeFileParams,
  async execute(params, ctx: ActionContext) {
    const target = inWorkspace(ctx, params.path);
    await mkdir(path.dirname(target), { recursive: true });
    // Re-check after mkdir: a directory created concurrently could be a symlink.
    inWorkspace(ctx, params.path);
    await writeFile(target, params.content, 'utf8');
    return { path: params.path, bytes: Buffer.byteLength(params.content, 'utf8') };
  },
};

/** read_file: returns text, truncated with a note past maxBytes. */
export const readFileAction: ActionDefinition<z.infer<typeof readFileParams>> = {
  name: 'read_file',
  description: 'Read a UTF-8 text file from the workspace.',
  parameters: readFileParams,
  async execute(params, ctx) {
    const target = inWorkspace(ctx, params.path);
    const limit = params.maxBytes ?? DEFAULT_MAX_READ_BYTES;
    const info = await stat(target);
    if (info.isDirectory()) throw new Error(`"${params.path}" is a directory; use list_files`);
    if (info.size <= limit) return await readFile(target, 'utf8');
    const handle = await open(target, 'r');
    try {
      const buf = Buffer.alloc(limit);
      const { bytesRead } = await handle.read(buf, 0, limit, 0);
      // Drop a partial multi-byte character at the cut rather than emit a replacement char.
      const text = new TextDecoder('utf-8', { fatal: false }).decode(buf.subarray(0, bytesRead)).replace(/\uFFFD$/, '');
      return `${text}\n[truncated: showed ${bytesRead} of ${info.size} bytes; pass a larger maxBytes to read more]`;
    } finally {
      await handle.close();
    }
  },
};

/** list_files: names in a directory, directories suffixed with "/", harness state hidden. */
export const listFilesAction: ActionDefinition<z.infer<typeof listFilesParams>> = {
  name: 'list_files',
  description: 'List the entries of a workspace directory; directories end with "/".',
  parameters: listFilesParams,
  async execute(params, ctx) {
    const target = inWorkspace(ctx, params.path);
    const entries = await readdir(target, { withFileTypes: true });
    return entries
      .filter((e) => !(e.isDirectory() && HIDDEN_STATE_DIRS.has(e.name)))
      .map((e) => (e.isDirectory() ? `${e.name}/` : e.name))
      .sort();
  },
};

/** echo: returns its input; useful for tests and demos. */
export const echoAction: ActionDefinition<z.infer<typeof echoParams>> = {
  name: 'echo',
  description: 'Return the given text unchanged.',
  parameters: echoParams,
  async execute(params) {
    return params.text;
  },
};

/** All built-in actions. */
export const builtinActions: readonly ActionDefinition[] = [
  writeFileAction,
  readFileAction,
  listFilesAction,
  echoAction,
] as unknown as readonly ActionDefinition[];

/** A registry holding the built-in actions. */
export function createBuiltinRegistry(): ActionRegistry {
  const registry = new ActionRegistry();
  for (const action of builtinActions) registry.register(action);
  return registry;
}
