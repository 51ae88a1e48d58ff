/**
 * Operator keys: Ed25519. An operator holds a private key file (made by `durable-harness operator keygen`, mode
 * 0600); workers know only the public key, as `ed25519:<base64 of the 32 raw bytes>`, and identify it by its key id
 * (the first 16 hex digits of its SHA-256).
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFileSync, statSync, writeFileSync } from 'node:fs';

/** A broken key or key file (exit 2). */
export class OperatorKeyError extends Error {
  override readonly name = 'OperatorKeyError';
}

/** What an operator's key file holds. */
export interface OperatorKeyFile {
  /** The operator's name, as declared in the workers' operators file. */
  readonly operator: string;
  readonly keyId: string;
  /** The public key, for the operators file. */
  readonly publicKey: string;
  /** PKCS#8 PEM. */
  readonly privateKey: string;
}

/** A loaded private key, ready to sign. */
export interface OperatorSigner {
  readonly operator: string;
  readonly keyId: string;
  readonly key: KeyObject;
}

const PUBLIC_PREFIX = 'ed25519:';

/** The public key text (`ed25519:BASE64`) of a key object. */
export function publicKeyText(key: KeyObject): string {
  const jwk = createPublicKey(key).export({ format: 'jwk' });
  return `${PUBLIC_PREFIX}${Buffer.from(jwk.x!, 'base64url').toString('base64')}`;
}

/** The key id of a public key text. */
export function keyIdOf(publicKey: string): string {
  return createHash('sha256').update(publicKey).digest('hex').slice(0, 16);
}

/** Parses `ed25519:BASE64` (32 raw bytes) into a public key object. */
export function parsePublicKey(text: string, where: string): KeyObject {
  const raw = text.startsWith(PUBLIC_PREFIX) ? Buffer.from(text.slice(PUBLIC_PREFIX.length), 'base64') : undefined;
  if (!raw || raw.length !== 32 || raw.toString('base64') !== text.slice(PUBLIC_PREFIX.length)) {
    throw new OperatorKeyError(`${where}: expected an Ed25519 public key as "ed25519:<base64 of 32 bytes>" (printed by \`durable-harness operator keygen\`), got ${JSON.stringify(text.slice(0, 80))}`);
  }
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') }, format: 'jwk' });
}

/** A new key pair for `operator`. */
export function generateOperatorKey(operator: string): OperatorKeyFile {
  const { privateKey } = generateKeyPairSync('ed25519');
  const publicKey = publicKeyText(privateKey);
  return { operator, keyId: keyIdOf(publicKey), publicKey, privateKey: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString() };
}

/** Writes a key file readable by its owner only; never overwrites one. */
export function writeOperatorKeyFile(file: string, key: OperatorKeyFile): void {
  try {
    writeFileSync(file, `${JSON.stringify(key, null, 2)}\n`, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new OperatorKeyError(code === 'EEXIST' ? `${file} exists already; choose another --out (a key file is never overwritten)` : `cannot write ${file}: ${(err as Error).message}`);
  }
}

/** Loads a signer from key file text (JSON as written by `keygen`). */
export function signerFromKeyFile(text: string, where: string): OperatorSigner {
  let parsed: Partial<OperatorKeyFile>;
  try {
    parsed = JSON.parse(text) as Partial<OperatorKeyFile>;
  } catch {
    throw new OperatorKeyError(`${where} is not an operator key file (JSON written by \`durable-harness operator keygen\`)`);
  }
  if (typeof parsed.operator !== 'string' || typeof parsed.privateKey !== 'string') throw new OperatorKeyError(`${where} lacks "operator" or "privateKey"; make a key with \`durable-harness operator keygen\``);
  let key: KeyObject;
  try {
    key = createPrivateKey(parsed.privateKey);
  } catch (err) {
    throw new OperatorKeyError(`${where}: the private key does not load (${(err as Error).message})`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new OperatorKeyError(`${where}: the key is ${key.asymmetricKeyType}, not Ed25519`);
  return { operator: parsed.operator, keyId: keyIdOf(publicKeyText(key)), key };
}

/**
 * The operator key of this command: `--key FILE`, else `DURABLE_HARNESS_OPERATOR_KEY_FILE`, else the file's text in
 * `DURABLE_HARNESS_OPERATOR_KEY`; undefined when none is given. A key file others can read is refused.
 */
export function operatorSignerFrom(file: string | undefined, env: Readonly<Record<string, string | undefined>> = process.env): OperatorSigner | undefined {
  const path = file ?? env.DURABLE_HARNESS_OPERATOR_KEY_FILE;
  if (path) {
    let text: string;
    try {
      const mode = statSync(path).mode & 0o077;
      if (mode !== 0) throw new OperatorKeyError(`operator key file ${path} is readable by others (mode ${(statSync(path).mode & 0o777).toString(8)}); chmod 600 it`);
      text = readFileSync(path, 'utf8');
    } catch (err) {
      if (err instanceof OperatorKeyError) throw err;
      throw new OperatorKeyError(`cannot read operator key file ${path}: ${(err as Error).message}`);
    }
    return signerFromKeyFile(text, path);
  }
  if (env.DURABLE_HARNESS_OPERATOR_KEY) return signerFromKeyFile(env.DURABLE_HARNESS_OPERATOR_KEY, 'DURABLE_HARNESS_OPERATOR_KEY');
  return undefined;
}
