/**
 * Which secrets the worker holds appear in what a push would carry (issue 24): a granted key the harness wrote into a
 * file stops the push, named by its grant — never printed. Only what the patch ADDS is scanned: a removed line is
 * already on the remote, and a value that was there before is not this run's leak.
 *
 * What is scanned, for each value of 8 characters or more (shorter values are NOT scanned: they match too much text
 * by chance to stop a push on):
 * - the value as written, its base64 (standard and URL-safe alphabets, at every alignment inside a longer base64
 *   string) and its URL-encoded forms (`%XX` upper and lower case, `+` for spaces) — wherever the value has any;
 * - in added lines of text hunks, the new path of a file (`+++`, `rename to`, `copy to`, a new file's `diff --git`);
 * - in `GIT binary patch` hunks, the decoded content: a `literal` hunk's new file, a `delta` hunk's inserted bytes
 *   (a value pieced together from bytes the delta copies out of the old file is not found). The reverse hunk (the old
 *   content) is skipped.
 * Not scanned: other encodings (hex, UTF-16, compression inside a binary file) and values split across lines.
 *
 * Bounded: one pass splits the patch, each form is one substring search over the added text (linear in the patch for a
 * fixed set of secrets), and binary hunks decode to at most `maxBinaryBytes` in all — past that, or on a hunk that does
 * not decode, the scan throws `SecretScanIncomplete` rather than answer "none found" for bytes it did not read.
 */
import { inflateSync } from 'node:zlib';

/** A secret the worker holds: `name` is what a refusal says (a grant's name), `value` is never returned. */
export interface NamedSecret {
  readonly name: string;
  readonly value: string;
}

/** A value shorter than this is not scanned. */
export const MIN_SCANNED_SECRET_CHARS = 8;

/** A patch the scan could not read in full (a binary hunk that does not decode, or too many binary bytes). */
export class SecretScanIncomplete extends Error {
  override readonly name = 'SecretScanIncomplete';
}

/** The names of the secrets whose value (or an encoded form of it) the patch adds; in the order given, each once. */
export function findSecrets(patch: string, secrets: readonly NamedSecret[], options: { maxBinaryBytes?: number } = {}): string[] {
  const scanned = secrets.filter((s) => s.value.length >= MIN_SCANNED_SECRET_CHARS);
  if (scanned.length === 0) return [];
  const added = addedContent(patch, options.maxBinaryBytes ?? 256 * 1024 * 1024);
  return matching(scanned, added.text, added.binary);
}

/** The names of the secrets found anywhere in `text` (a commit message, a pull request's title and body). */
export function findSecretsInText(text: string, secrets: readonly NamedSecret[]): string[] {
  return matching(
    secrets.filter((s) => s.value.length >= MIN_SCANNED_SECRET_CHARS),
    text,
    [],
  );
}

function matching(secrets: readonly NamedSecret[], text: string, binary: readonly Buffer[]): string[] {
  const found = new Set<string>();
  for (const secret of secrets) {
    if (found.has(secret.name)) continue;
    const forms = encodedForms(secret.value);
    const hit = forms.some((form) => text.includes(form)) || (binary.length > 0 && forms.some((form) => binary.some((b) => b.includes(form, 0, 'utf8'))));
    if (hit) found.add(secret.name);
  }
  return [...found];
}

/** The value as written, its base64 at each alignment (both alphabets) and its URL-encoded forms; distinct. */
export function encodedForms(value: string): string[] {
  const bytes = Buffer.from(value, 'utf8');
  const forms = new Set<string>([value]);
  for (let offset = 0; offset < 3; offset += 1) {
    // The value after `offset` bytes of anything: only the characters no neighbouring byte changes are kept.
    const encoded = Buffer.concat([Buffer.alloc(offset), bytes]).toString('base64');
    const stable = encoded.slice(Math.ceil((8 * offset) / 6), Math.floor((8 * (offset + bytes.length)) / 6));
    forms.add(stable);
    forms.add(stable.replace(/\+/g, '-').replace(/\//g, '_'));
  }
  // encodeURIComponent's; RFC 3986's, which also escapes `!'()*` (Python's quote, Go's escapers); and form encoding's
  // (URLSearchParams), which also escapes `~` and writes a space as `+`.
  const component = encodeURIComponent(value);
  const rfc3986 = component.replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  const form = new URLSearchParams([['', value]]).toString().slice(1);
  for (const url of [component, rfc3986, form]) {
    forms.add(url);
    forms.add(url.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()));
    forms.add(url.replace(/%20/g, '+'));
  }
  return [...forms].filter((f) => f.length > 0);
}

/** The text a patch adds (added lines and new paths, joined by newlines) and the bytes its binary hunks add. */
function addedContent(patch: string, maxBinaryBytes: number): { text: string; binary: Buffer[] } {
  const text: string[] = [];
  const binary: Buffer[] = [];
  let binaryBudget = maxBinaryBytes;
  let oldLeft = 0;
  let newLeft = 0;
  let fileHeader: string | undefined; // a `diff --git` line, kept until we know whether the file is new
  let state: 'header' | 'hunk' | 'binary-forward' | 'binary-reverse' = 'header';
  let block: { kind: 'literal' | 'delta'; size: number; lines: string[] } | undefined;

  let start = 0;
  while (start <= patch.length) {
    let end = patch.indexOf('\n', start);
    if (end < 0) end = patch.length;
    const line = patch.slice(start, end);
    start = end + 1;
    if (end === patch.length && line === '') break;

    if (state === 'hunk') {
      const c = line.charCodeAt(0);
      if (c === 0x2b /* + */) {
        text.push(line.slice(1));
        newLeft -= 1;
      } else if (c === 0x2d /* - */) oldLeft -= 1;
      else if (c === 0x20 /* space */ || line === '') {
        oldLeft -= 1;
        newLeft -= 1;
      } else if (c !== 0x5c /* \ No newline at end of file */) {
        state = 'header'; // not a hunk line: read it as a header below
      }
      if (state === 'hunk') {
        if (oldLeft <= 0 && newLeft <= 0) state = 'header';
        continue;
      }
    }

    if (state === 'binary-forward' || state === 'binary-reverse') {
      const opening = /^(literal|delta) (\d+)$/.exec(line);
      if (!block && opening) {
        block = { kind: opening[1] as 'literal' | 'delta', size: Number(opening[2]), lines: [] };
        continue;
      }
      if (block && line !== '') {
        if (state === 'binary-forward') block.lines.push(line);
        continue;
      }
      if (block && state === 'binary-forward') {
        if (block.size > binaryBudget) throw new SecretScanIncomplete(`a binary hunk of ${block.size} bytes is over what the secret scan decodes (${maxBinaryBytes} bytes in all)`);
        binaryBudget -= block.size;
        binary.push(decodeBinaryHunk(block));
        block = undefined;
        state = 'binary-reverse';
        continue;
      }
      if (block) {
        block = undefined;
        state = 'header';
        continue;
      }
      state = 'header'; // no reverse hunk: read the line as a header
    }

    if (line.startsWith('diff --git ')) {
      fileHeader = line;
      continue;
    }
    if (line.startsWith('@@ ')) {
      const m = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/.exec(line);
      // A header we cannot read: take every following line as part of a hunk until the next file.
      oldLeft = m ? Number(m[1] ?? 1) : Infinity;
      newLeft = m ? Number(m[2] ?? 1) : Infinity;
      if (oldLeft > 0 || newLeft > 0) state = 'hunk';
      continue;
    }
    if (line.startsWith('new file mode ') && fileHeader) text.push(fileHeader);
    else if (line.startsWith('+++ ')) text.push(line.slice(4));
    else if (line.startsWith('rename to ') || line.startsWith('copy to ')) text.push(line);
    else if (line === 'GIT binary patch') {
      state = 'binary-forward';
      block = undefined;
    }
  }
  if (state === 'binary-forward' && block) {
    if (block.size > binaryBudget) throw new SecretScanIncomplete(`a binary hunk of ${block.size} bytes is over what the secret scan decodes (${maxBinaryBytes} bytes in all)`);
    binary.push(decodeBinaryHunk(block));
  }
  return { text: text.join('\n'), binary };
}

const base85Alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~';
const base85Value = new Int16Array(128).fill(-1);
for (let i = 0; i < base85Alphabet.length; i += 1) base85Value[base85Alphabet.charCodeAt(i)] = i;

/** A `literal` hunk's new content, or the bytes a `delta` hunk inserts (git's base85 lines, then zlib). */
function decodeBinaryHunk(block: { kind: 'literal' | 'delta'; size: number; lines: readonly string[] }): Buffer {
  const parts: Buffer[] = [];
  for (const line of block.lines) {
    const first = line.charCodeAt(0);
    const length = first >= 0x41 && first <= 0x5a ? first - 0x41 + 1 : first >= 0x61 && first <= 0x7a ? first - 0x61 + 27 : -1;
    if (length < 0 || (line.length - 1) % 5 !== 0 || (line.length - 1) / 5 < Math.ceil(length / 4)) throw new SecretScanIncomplete('a binary hunk of the patch does not decode (bad base85 line)');
    const out = Buffer.alloc(((line.length - 1) / 5) * 4);
    for (let i = 1, o = 0; i < line.length; i += 5, o += 4) {
      let acc = 0;
      for (let j = 0; j < 5; j += 1) {
        const code = line.charCodeAt(i + j);
        const digit = code < 128 ? base85Value[code]! : -1;
        if (digit < 0) throw new SecretScanIncomplete('a binary hunk of the patch does not decode (bad base85 character)');
        acc = acc * 85 + digit;
      }
      if (acc > 0xffffffff) throw new SecretScanIncomplete('a binary hunk of the patch does not decode (base85 overflow)');
      out.writeUInt32BE(acc, o);
    }
    parts.push(out.subarray(0, length));
  }
  let inflated: Buffer;
  try {
    inflated = inflateSync(Buffer.concat(parts), { maxOutputLength: Math.max(1, block.size) });
  } catch {
    throw new SecretScanIncomplete('a binary hunk of the patch does not decode (zlib)');
  }
  return block.kind === 'literal' ? inflated : deltaInsertions(inflated);
}

/** The bytes a git delta inserts, in order; copies from the old content are left out (we do not have it). */
function deltaInsertions(delta: Buffer): Buffer {
  let i = 0;
  const varint = () => {
    let shift = 0;
    let byte: number;
    do {
      if (i >= delta.length) throw new SecretScanIncomplete('a binary delta of the patch does not decode (header)');
      byte = delta[i++]!;
      shift += 7;
    } while (byte & 0x80 && shift < 64);
  };
  varint(); // the old content's size
  varint(); // the new content's size
  const inserted: Buffer[] = [];
  while (i < delta.length) {
    const op = delta[i++]!;
    if (op & 0x80) {
      // A copy: skip its offset and size bytes (one per bit set in the low seven bits).
      for (let bit = 0; bit < 7; bit += 1) if (op & (1 << bit)) i += 1;
      // A copy breaks the inserted text: a value across it is not one the run wrote whole.
      inserted.push(Buffer.from([0]));
    } else if (op > 0) {
      inserted.push(delta.subarray(i, i + op));
      i += op;
    } else {
      throw new SecretScanIncomplete('a binary delta of the patch does not decode (reserved opcode)');
    }
  }
  return Buffer.concat(inserted);
}
