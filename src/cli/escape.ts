/**
 * Escaping of user- and harness-supplied text before it reaches a terminal: every control or bidi-override
 * character becomes a visible escape (`\n`, `\x1b`, `\u202e`). One implementation for every room
 * (src/contracts/visible-text.ts).
 */
export { escapeControl, escapeText } from '../contracts/visible-text.js';
