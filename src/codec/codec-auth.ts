/**
 * Who may use the codec server. Whoever can decode reads every payload of a namespace (tasks, results, replies),
 * and whoever can encode mints payloads the workers accept, so every request carries a bearer token from the
 * server's configuration, and each token names the namespaces it may decode for. Temporal's documentation asks
 * the same of any codec server: restrict it, and authorize per user.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isReadToken, verifyReadToken, type OperatorDirectory } from '../operators/index.js';

/** One accepted token: who holds it and the namespaces it may decode (and, when enabled, encode) for. */
export interface CodecToken {
  /** Shown in the server's log for refusals and in nothing else; never the token itself. */
  readonly name: string;
  readonly token: string;
  /** `*` for every namespace. */
  readonly namespaces: readonly string[];
}

/** A token shorter than this is refused at start: it could be guessed. */
export const MIN_CODEC_TOKEN_LENGTH = 24;

/** A broken token configuration (exit 2). */
export class CodecAuthConfigError extends Error {
  override readonly name = 'CodecAuthConfigError';
}

/** A fresh random token (256 bits, base64url). */
export function generateCodecToken(): string {
  return randomBytes(32).toString('base64url');
}

const fixHint =
  'set DURABLE_HARNESS_CODEC_TOKENS to NAME=TOKEN[@NAMESPACE|NAMESPACE...] entries separated by commas ' +
  '(make a token with `durable-harness codec-token`), or DURABLE_HARNESS_CODEC_TOKENS_FILE to a file with one entry per line';

/**
 * Parses `NAME=TOKEN[@NS|NS...]` entries (comma or newline separated; `#` starts a comment line). Without `@`, a
 * token may decode for every namespace.
 */
export function parseCodecTokens(text: string, source: string): CodecToken[] {
  const tokens: CodecToken[] = [];
  const entries = text
    .split(/[\n,]/)
    .map((e) => e.trim())
    .filter((e) => e !== '' && !e.startsWith('#'));
  for (const [i, entry] of entries.entries()) {
    const eq = entry.indexOf('=');
    const name = eq > 0 ? entry.slice(0, eq).trim() : '';
    const rest = eq > 0 ? entry.slice(eq + 1).trim() : '';
    const at = rest.lastIndexOf('@');
    const token = at >= 0 ? rest.slice(0, at) : rest;
    const namespaces = at >= 0 ? rest.slice(at + 1).split('|').map((n) => n.trim()).filter(Boolean) : ['*'];
    const where = `${source} entry ${i + 1}${name ? ` ("${name}")` : ''}`;
    if (!name || !/^[\w.@:-]{1,64}$/.test(name)) throw new CodecAuthConfigError(`${where}: expected NAME=TOKEN with a name of letters, digits and .@:_-; ${fixHint}`);
    if (token.length < MIN_CODEC_TOKEN_LENGTH) throw new CodecAuthConfigError(`${where}: the token is shorter than ${MIN_CODEC_TOKEN_LENGTH} characters; make one with \`durable-harness codec-token\``);
    if (/\s/.test(token)) throw new CodecAuthConfigError(`${where}: the token contains white space`);
    if (namespaces.length === 0) throw new CodecAuthConfigError(`${where}: "@" must be followed by namespaces separated by "|"`);
    if (tokens.some((t) => t.name === name)) throw new CodecAuthConfigError(`${where}: the name "${name}" is given twice`);
    tokens.push({ name, token, namespaces });
  }
  return tokens;
}

/** The tokens from `DURABLE_HARNESS_CODEC_TOKENS` and `DURABLE_HARNESS_CODEC_TOKENS_FILE` (both may be set). */
export function codecTokensFromEnvironment(env: Readonly<Record<string, string | undefined>> = process.env): CodecToken[] {
  const tokens = env.DURABLE_HARNESS_CODEC_TOKENS ? parseCodecTokens(env.DURABLE_HARNESS_CODEC_TOKENS, 'DURABLE_HARNESS_CODEC_TOKENS') : [];
  const file = env.DURABLE_HARNESS_CODEC_TOKENS_FILE;
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new CodecAuthConfigError(`DURABLE_HARNESS_CODEC_TOKENS_FILE ${file} cannot be read (${(err as Error).message}); ${fixHint}`);
    }
    for (const t of parseCodecTokens(text, file)) {
      if (tokens.some((u) => u.name === t.name)) throw new CodecAuthConfigError(`${file}: the name "${t.name}" is also in DURABLE_HARNESS_CODEC_TOKENS`);
      tokens.push(t);
    }
  }
  return tokens;
}

/**
 * Throws unless somebody can be let in: a configured token, or an operator with the `read` role (who presents a
 * token signed with their key). A codec server never decodes for anyone who asks.
 */
export function requireCodecTokens(tokens: readonly CodecToken[], operators?: OperatorDirectory): void {
  if (tokens.length > 0 || operators?.operators.some((o) => o.roles.includes('read'))) return;
  throw new CodecAuthConfigError(`the codec server needs at least one access token: ${fixHint}; or operators with the role "read" in DURABLE_HARNESS_OPERATORS_FILE`);
}

const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();

/**
 * Matches presented tokens: a configured one (in constant time per configured token), or an operator's signed read
 * token checked against the operators file as it is at that request.
 */
export class CodecAuthorizer {
  private readonly known: readonly { readonly token: CodecToken; readonly digest: Buffer }[];

  constructor(
    tokens: readonly CodecToken[],
    private readonly operators?: () => OperatorDirectory,
  ) {
    requireCodecTokens(tokens, operators?.());
    this.known = tokens.map((token) => ({ token, digest: digest(token.token) }));
  }

  /** Who `presented` stands for (its name and namespaces), if anyone. */
  identify(presented: string | undefined): Pick<CodecToken, 'name' | 'namespaces'> | undefined {
    if (!presented) return undefined;
    if (isReadToken(presented) && this.operators) {
      const verified = verifyReadToken(presented, this.operators());
      return typeof verified === 'string' ? undefined : { name: `operator:${verified.operator}`, namespaces: verified.namespaces };
    }
    const d = digest(presented);
    let found: CodecToken | undefined;
    for (const k of this.known) if (timingSafeEqual(k.digest, d)) found = k.token;
    return found;
  }

  /** Whether `token` may work on `namespace`; a request that names no namespace needs a token for every namespace. */
  static allows(token: Pick<CodecToken, 'namespaces'>, namespace: string | undefined): boolean {
    if (token.namespaces.includes('*')) return true;
    return namespace !== undefined && token.namespaces.includes(namespace);
  }
}

/** The CORS origins as given; `*` is refused: a codec server answers only the Web UIs it was told about. */
export function parseCorsOrigins(given: readonly string[]): string[] {
  const origins = given.map((o) => o.trim()).filter(Boolean);
  for (const o of origins) {
    if (o === '*') throw new CodecAuthConfigError('CORS origin "*" is not accepted: name the Web UI\'s origin, e.g. --cors-origin http://ui.internal:8080');
    if (!/^https?:\/\/[^/\s]+$/.test(o)) throw new CodecAuthConfigError(`CORS origin "${o}" is not an origin: scheme://host[:port], without a path`);
  }
  return origins;
}
