/**
 * Built-in actions: small file operations on the sandbox's workspace, and an echo. They go through the
 * sandbox's `fs` (never a host path), which refuses links and paths that leave the workspace.
 */
import { z } from 'zod';
import { maxReadBytes } from '../sandbox/workspace-fs.js';
import type { ActionContext, ActionDefinition } from './types.js';
import { ActionRegistry } from './registry.js';

/** Default read limit: large enough for source files, small enough to keep turn input sane. */
export const DEFAULT_MAX_READ_BYTES = 64 * 1024;

/** Directory names that hold harness or runtime state, not the agent's work. */
const HIDDEN_STATE_DIRS: ReadonlySet<string> = new Set(['.home', '.durable-harness', '.claude', '.codex', '.gemini', '.opencode', '.pi', '.config', '.cache', '.npm']);

/** Control characters (C0, DEL, C1) and line separators: in a file name they forge lines in listings, logs and terminals. */
const controlCharacters = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;

/** `path` when it names something printable; else an error saying which character to drop. */
function printablePath(path: string): string {
  const found = path.match(controlCharacters);
  if (found) {
    const shown = path.replace(controlCharacters, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
    const which = [...new Set(found)].map((c) => `U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`).join(', ');
    throw new Error(`path "${shown}" contains control characters (${which}); nothing was done: use a file name of printable characters`);
  }
  return path;
}

const writeFileParams = z.strictObject({
  path: z.string().min(1).describe('File path relative to the workspace root'),
  content: z.string().describe('Full new content of the file (UTF-8)'),
});

const readFileParams = z.strictObject({
  path: z.string().min(1).describe('File path relative to the workspace root'),
  maxBytes: z.number().int().positive().max(maxReadBytes).optional().describe(`Read at most this many bytes (default ${DEFAULT_MAX_READ_BYTES})`),
});

const listFilesParams = z.strictObject({
  path: z.string().min(1).default('.').describe('Directory relative to the workspace root (default ".")'),
});

const echoParams = z.strictObject({
  text: z.string().describe('Text to echo back'),
});

/** write_file: creates parent directories; the path must stay inside the workspace and be printable. */
export const writeFileAction: ActionDefinition<z.infer<typeof writeFileParams>> = {
  name: 'write_file',
  description: 'Write a UTF-8 text file in the workspace, creating parent directories.',
  parameters: writeFileParams,
  async execute(params, ctx: ActionContext) {
    const { bytes } = await ctx.fs.writeFile(printablePath(params.path), params.content, { createParents: true });
    return { path: params.path, bytes };
  },
};

/** read_file: returns text, truncated with a note past maxBytes. */
export const readFileAction: ActionDefinition<z.infer<typeof readFileParams>> = {
  name: 'read_file',
  description: 'Read a UTF-8 text file from the workspace.',
  parameters: readFileParams,
  async execute(params, ctx) {
    const limit = params.maxBytes ?? DEFAULT_MAX_READ_BYTES;
    const { data, size } = await ctx.fs.readFile(printablePath(params.path), { maxBytes: limit });
    // Drop a partial multi-byte character at the cut rather than emit a replacement char.
    const text = new TextDecoder('utf-8', { fatal: false }).decode(data);
    if (size <= data.length) return text;
    return `${text.replace(/\uFFFD$/, '')}\n[truncated: showed ${data.length} of ${size} bytes; pass a larger maxBytes to read more]`;
  },
};

/** list_files: names in a directory, directories suffixed with "/", harness state hidden. */
export const listFilesAction: ActionDefinition<z.infer<typeof listFilesParams>> = {
  name: 'list_files',
  description: 'List the entries of a workspace directory; directories end with "/".',
  parameters: listFilesParams,
  async execute(params, ctx) {
    const entries = await ctx.fs.list(printablePath(params.path));
    return entries
      .filter((e) => !(e.type === 'directory' && HIDDEN_STATE_DIRS.has(e.name)))
      .map((e) => (e.type === 'directory' ? `${e.name}/` : e.name))
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
