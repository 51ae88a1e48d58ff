/**
 * Escaping of user- and harness-supplied text before it is shown (a terminal, the Temporal UI, a status answer).
 * Fields that come from callers or harnesses may hold control characters: an escape sequence that moves the cursor,
 * recolours or rewrites earlier output, a newline or tab that forges a row or a column, a bidi override that
 * reorders what is shown. They become visible escapes (`\n`, `\x1b`, `\u202e`), so what is shown is what the field
 * holds. In the contracts room so the turn activity (approval details) and the CLI escape alike.
 */

// C0 controls, DEL, C1 controls, line/paragraph separators, LRM/RLM, bidi embeddings/overrides/isolates, BOM.
const unsafe = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g;

const named: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

function visible(c: string): string {
  const code = c.charCodeAt(0);
  return named[c] ?? (code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`);
}

/** Returns `s` with every control or bidi-override character replaced by a visible escape (`\n`, `\x1b`, `\u202e`). */
export function escapeControl(s: string): string {
  return s.replace(unsafe, visible);
}

/** Free text over several lines (a result, a reason): its newlines kept as lines, every other control escaped. */
export function escapeText(s: string | undefined): string {
  return (s ?? '').split('\n').map(escapeControl).join('\n');
}
