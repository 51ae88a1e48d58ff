/**
 * Escaping of user- and harness-supplied text before it reaches a terminal: control characters (which could move
 * the cursor, recolour or rewrite earlier output) and bidirectional overrides become visible escapes.
 */

// C0 controls, DEL, C1 controls, and the Unicode bidi embedding/override/isolate characters.
const unsafe = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

const named: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** Returns `s` with every control or bidi-override character replaced by a visible escape (`\n`, `\x1b`, `\u202e`). */
export function escapeControl(s: string): string {
  return s.replace(unsafe, (c) => {
    const code = c.charCodeAt(0);
    return named[c] ?? (code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`);
  });
}
