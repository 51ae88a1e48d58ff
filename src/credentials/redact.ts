/**
 * Redaction: every string that crosses from a harness into the runtime — text, session ids, models, usage,
 * event payloads, error messages, stderr tails — passes through a redactor before it reaches workflow
 * history, the ledger, status, heartbeats or logs. It replaces each known secret value, verbatim and in its
 * JSON-escaped and URL-encoded forms, with `[REDACTED]` — also where the text spells it with JSON string escapes
 * (`\u0073k-…`, which the runtime's own JSON parsing would decode) or with invisible format characters (Unicode
 * Cf, e.g. U+200B) inside it. What it cannot see (base64, hex, a key split across fields or lines) is in
 * docs/SECURITY.md.
 */
import type { AgentConfig, Catalog, HarnessConfig } from '../catalog/schema.js';
import { resolveCredentials, vendorFallbackVariable, type CredentialStore } from './resolve.js';

/** Replaces secrets in one string. */
export type Redactor = (text: string) => string;

/** Shortest secret worth redacting; shorter values would mangle ordinary text. */
const MIN_SECRET_LENGTH = 4;

export const redactedMarker = '[REDACTED]';

/** Text that may spell a secret in another form than verbatim: a JSON `\u`/`\/` escape, or a format character. */
const mayHideSecret = /\\[u/]|\p{Cf}/u;

/** Returns a function that replaces every secret (raw, JSON-escaped, URL-encoded) with `[REDACTED]`. */
export function createRedactor(secrets: Iterable<string>): Redactor {
  const needles = new Set<string>();
  const raw = new Set<string>();
  for (const secret of secrets) {
    if (secret.length < MIN_SECRET_LENGTH) continue;
    raw.add(secret);
    needles.add(secret);
    needles.add(JSON.stringify(secret).slice(1, -1));
    needles.add(encodeURIComponent(secret));
  }
  // Longest first, so a secret that contains another is replaced whole.
  const ordered = [...needles].sort((a, b) => b.length - a.length);
  const spelled = [...raw].sort((a, b) => b.length - a.length).map((secret) => ({ secret, pattern: new RegExp(spelledPattern(secret), 'gu') }));
  return (text: string) => {
    let out = text;
    for (const needle of ordered) {
      if (out.includes(needle)) out = out.split(needle).join(redactedMarker);
    }
    // Only text with an escape or a format character can spell a secret otherwise; a cheap decoded view says which
    // secret it spells, and only that one's (slower) pattern runs.
    if (spelled.length === 0 || !mayHideSecret.test(out)) return out;
    const view = readableView(out);
    for (const { secret, pattern } of spelled) if (view.includes(secret)) out = out.replace(pattern, redactedMarker);
    return out;
  };
}

/**
 * The text as it reads once its `\u` (four hex digits) and `\/` escapes are decoded and its format characters dropped — a superset
 * check, so other escapes and quotes are blanked. Decoded by the native JSON parser: far faster than a loop here.
 */
function readableView(text: string): string {
  const body = text
    .replace(/[\u0000-\u001f]/g, ' ')
    .replace(/\\(?!u[0-9a-fA-F]{4}|\/)/g, ' ')
    .replaceAll('"', ' ');
  const decoded = JSON.parse(`"${body}"`) as string;
  return formatCharacter.test(decoded) ? withoutFormatCharacters(decoded) : decoded;
}

const formatCharacter = /\p{Cf}/u;
/** Unicode's format characters (Cf), as [first, last] code points, ascending. */
const formatRanges: readonly (readonly [number, number])[] = [
  [0xad, 0xad], [0x600, 0x605], [0x61c, 0x61c], [0x6dd, 0x6dd], [0x70f, 0x70f], [0x890, 0x891], [0x8e2, 0x8e2], [0x180e, 0x180e],
  [0x200b, 0x200f], [0x202a, 0x202e], [0x2060, 0x2064], [0x2066, 0x206f], [0xfeff, 0xfeff], [0xfff9, 0xfffb], [0x110bd, 0x110bd],
  [0x110cd, 0x110cd], [0x13430, 0x1343f], [0x1bca0, 0x1bca3], [0x1d173, 0x1d17a], [0xe0001, 0xe0001], [0xe0020, 0xe007f],
];
const isFormat = (code: number) => formatRanges.some(([first, last]) => code >= first && code <= last);
const utf16 = new TextDecoder('utf-16le');

/** `text` without its format characters; a copy loop, since a regex replace pays per match (a flood has millions). */
function withoutFormatCharacters(text: string): string {
  const kept = new Uint16Array(text.length);
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0xad) {
      kept[n++] = unit;
      continue;
    }
    const code = text.codePointAt(i)!;
    const width = code > 0xffff ? 2 : 1;
    if (!isFormat(code)) for (let j = 0; j < width; j++) kept[n++] = text.charCodeAt(i + j);
    i += width - 1;
  }
  return utf16.decode(kept.subarray(0, n));
}

/** Format characters a JSON string may carry as escapes: soft hyphen, zero-width and bidi marks, word joiners, BOM. */
const escapedFormatCharacter = '\\\\u(?:00[aA][dD]|200[b-fB-F]|202[a-eA-E]|206[0-4]|206[6-9a-fA-F]|[fF][eE][fF][fF])';
const jsonEscapeOf: Readonly<Record<string, string>> = { '"': '\\"', '\\': '\\\\', '/': '\\/', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * A pattern for `secret` as a reader (or the runtime's JSON parsing) would see it: each character verbatim or as a
 * JSON escape (`\u0073`, `\/`), with format characters (Unicode Cf), verbatim or escaped, allowed between them.
 */
function spelledPattern(secret: string): string {
  const between = `(?:\\p{Cf}|${escapedFormatCharacter})*`;
  return [...secret].map(spellingsOf).join(between);
}

function spellingsOf(char: string): string {
  const units = Array.from({ length: char.length }, (_, i) => char.charCodeAt(i));
  const hex = (unit: number) => [...unit.toString(16).padStart(4, '0')].map((d) => (/[a-f]/.test(d) ? `[${d}${d.toUpperCase()}]` : d)).join('');
  const spellings = [char.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&'), units.map((u) => `\\\\u${hex(u)}`).join('')];
  const simple = jsonEscapeOf[char];
  if (simple) spellings.push(simple.replace(/\\/g, '\\\\'));
  return `(?:${spellings.join('|')})`;
}

/** A copy of `value` with every string in it — object keys included — redacted. */
export function redactDeep<T>(value: T, redact: Redactor): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return redact(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object' && !(v instanceof Uint8Array)) {
      const out: Record<string, unknown> = {};
      for (const [key, inner] of Object.entries(v)) out[redact(key)] = walk(inner);
      return out;
    }
    return v;
  };
  return walk(value) as T;
}

/** The stream with every item redacted before anyone sees it. */
export async function* redactStream<T>(items: AsyncIterable<T>, redact: Redactor): AsyncIterable<T> {
  for await (const item of items) yield redactDeep(item, redact);
}

/**
 * Every secret value this worker could hand any harness under `catalog`: each agent's grants, the vendor-key
 * fallbacks, and every value in the credential store. A harness that read another agent's key (or the
 * credentials file) still cannot get it into history.
 */
export function knownSecrets(catalog: Pick<Catalog, 'agents' | 'harnesses'>, store: CredentialStore | undefined, env: Readonly<Record<string, string | undefined>>): string[] {
  const secrets = new Set<string>(store?.values?.() ?? []);
  for (const agent of catalog.agents as readonly AgentConfig[]) {
    const harness = (catalog.harnesses as readonly HarnessConfig[]).find((h) => h.name === agent.harness);
    if (!harness) continue;
    try {
      for (const secret of resolveCredentials({ agent, harness, store, env }).secrets) secrets.add(secret);
    } catch {
      // An unmet grant has no value to redact.
    }
  }
  for (const harness of catalog.harnesses as readonly HarnessConfig[]) {
    const value = env[vendorFallbackVariable(harness.driverClass)];
    if (value) secrets.add(value);
  }
  return [...secrets];
}
