/**
 * Escaping for terminal output. Fields that come from users or harnesses (tenant and user ids, agent names,
 * workflow ids, status details, results) may hold control characters: an escape sequence that rewrites the
 * screen, a newline or tab that forges a row or a column, a bidi override that reorders what is shown. These
 * functions make every such character visible instead (`\x1b`, `\n`, `\u202e`), so what is printed is what
 * the field holds.
 */

/** C0 controls, DEL, C1 controls, line/paragraph separators, bidi embeddings/overrides/isolates, BOM. */
const unsafe = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g;
const unsafeKeepingLines = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g;

const named: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t', '\\': '\\\\' };

function visible(char: string): string {
  const known = named[char];
  if (known) return known;
  const code = char.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
}

/**
 * One field on one line (a table cell, an id): every control character, newline and tab made visible, and
 * backslashes doubled so an escaped form cannot be confused with a real one.
 */
export function escapeField(value: unknown): string {
  if (value === undefined || value === null) return '';
  return String(value).replace(/\\/g, '\\\\').replace(unsafe, visible);
}

/** Free text over several lines (a result, a reason): newlines and tabs kept, every other control made visible. */
export function escapeText(value: unknown): string {
  if (value === undefined || value === null) return '';
  return String(value).replace(unsafeKeepingLines, visible);
}
