/**
 * What a permission request would do, for the operator asked to decide it: a write's content, an edit's diff, a
 * patch, a command with its argv and working directory — from the tool input the harness sent (as the ledger keeps
 * it: redacted). The title says which file; this says what it will hold, so approving `Write run.sh` shows the script
 * a later `sh run.sh` would run.
 *
 * It is harness text on its way into workflow history and onto screens: bounded (`DETAIL_CHARS`, then "… N more
 * bytes") and with every control character but the newline made visible.
 */
import { escapeText } from '../contracts/visible-text.js';

/** How much of a request's detail is shown (characters, after escaping). */
export const DETAIL_CHARS = 4096;

type Fields = Record<string, unknown>;

const utf8Bytes = (s: string) => new TextEncoder().encode(s).length;

const isObject = (v: unknown): v is Fields => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The first of `keys` that holds a string. */
function text(fields: Fields, ...keys: string[]): string | undefined {
  for (const key of keys) if (typeof fields[key] === 'string') return fields[key] as string;
  return undefined;
}

/** A change of a text: the lines that differ, old ones `-`, new ones `+` (the lines both share around them left out). */
export function lineDiff(before: string, after: string): string {
  const a = before.split('\n');
  const b = after.split('\n');
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const removed = a.slice(head, a.length - tail).map((l) => `-${l}`);
  const added = b.slice(head, b.length - tail).map((l) => `+${l}`);
  return [...(head > 0 ? [`@@ after line ${head} @@`] : []), ...removed, ...added].join('\n');
}

/** One edit of a file: a replacement (`old` → `new`) or a whole new content. */
function editText(fields: Fields): string | undefined {
  const before = text(fields, 'old_string', 'oldString', 'oldText', 'old_text');
  const after = text(fields, 'new_string', 'newString', 'newText', 'new_text');
  if (before !== undefined && after !== undefined) return lineDiff(before, after);
  const content = text(fields, 'content', 'contents', 'newText', 'new_text', 'text');
  if (content !== undefined) return `new content (${utf8Bytes(content)} bytes):\n${content}`;
  return text(fields, 'diff', 'patch', 'unified_diff');
}

/** The raw detail of a request, before it is bounded and escaped; undefined when the input says no more than the title. */
function rawDetail(ask: DetailSource): string | undefined {
  const input = isObject(ask.input) ? ask.input : undefined;
  if (ask.kind === 'command') {
    const lines: string[] = [];
    const argv = input && Array.isArray(input.command) ? input.command : input && Array.isArray(input.argv) ? input.argv : undefined;
    const command = ask.command ?? (input ? text(input, 'command', 'cmd') : undefined);
    if (command !== undefined) lines.push(`command: ${command}`);
    lines.push(argv ? `argv: ${JSON.stringify(argv)}` : 'argv: not given (a shell string: the harness runs it with its own shell)');
    const cwd = input ? text(input, 'cwd', 'workdir', 'working_directory', 'dir', 'directory') : undefined;
    lines.push(`cwd: ${cwd ?? "not given (the harness's current directory)"}`);
    return lines.join('\n');
  }
  if (ask.kind === 'edit' && input) {
    const path = text(input, 'file_path', 'filePath', 'filepath', 'path', 'notebook_path') ?? ask.paths?.[0];
    const where = path !== undefined ? `${path}:\n` : '';
    // claude's MultiEdit: several replacements of one file.
    if (Array.isArray(input.edits)) return `${where}${input.edits.filter(isObject).map((e) => editText(e) ?? JSON.stringify(e)).join('\n')}`;
    // codex's apply_patch: each changed file with its diff.
    if (Array.isArray(input.changes)) {
      return input.changes
        .filter(isObject)
        .map((c) => `${text(c, 'kind') ?? 'update'} ${text(c, 'path') ?? '?'}:\n${text(c, 'diff') ?? ''}`)
        .join('\n');
    }
    const edit = editText(input);
    if (edit !== undefined) return `${where}${edit}`;
  }
  if (input === undefined || Object.keys(input).length === 0) return ask.input === undefined || ask.input === null || isObject(ask.input) ? undefined : JSON.stringify(ask.input);
  return JSON.stringify(input, null, 2);
}

/** What the detail is made from: a permission request as the ledger keeps it. */
export interface DetailSource {
  readonly kind: string;
  readonly input: unknown;
  readonly command?: string;
  readonly paths?: readonly string[];
}

/** `raw` bounded to `max` characters once escaped (newlines kept), with how many bytes were left out. */
export function boundedVisible(raw: string, max: number): string {
  // Escaping only lengthens a text: its first `max` characters are the most that can be shown.
  let cut = Math.min(raw.length, max);
  let shown = escapeText(raw.slice(0, cut));
  while (shown.length > max) {
    cut = Math.floor(cut / 2);
    shown = escapeText(raw.slice(0, cut));
  }
  if (cut >= raw.length) return shown;
  return `${shown}… ${utf8Bytes(raw) - utf8Bytes(raw.slice(0, cut))} more bytes`;
}

/** The request's detail as every view shows it (bounded, escaped), or undefined when the title says it all. */
export function approvalDetail(ask: DetailSource): string | undefined {
  const raw = rawDetail(ask);
  return raw === undefined ? undefined : boundedVisible(raw, DETAIL_CHARS);
}
