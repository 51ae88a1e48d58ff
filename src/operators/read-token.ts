/**
 * The `read` role: an operator reads a namespace's payloads through the codec server with a short-lived bearer
 * token signed by their own key (`durable-harness operator token`), checked against the same operators file the
 * workers use — no shared secret to hand around, and a revoked key or role stops working at the next request.
 *
 *   dhop1.<base64url of the claim's canonical JSON>.<base64url of its Ed25519 signature>
 */
import { sign, verify } from 'node:crypto';
import { canonicalJson } from '../permissions/gate.js';
import type { OperatorDirectory } from './config.js';
import type { OperatorSigner } from './keys.js';

const PREFIX = 'dhop1';
/** The longest a read token may live. */
export const MAX_READ_TOKEN_TTL_MS = 12 * 3600_000;
const SKEW_MS = 60_000;

interface ReadClaim {
  readonly v: 1;
  readonly use: 'read';
  readonly operator: string;
  readonly keyId: string;
  /** `*` for every namespace. */
  readonly namespaces: readonly string[];
  readonly issuedAt: string;
  readonly expiresAt: string;
}

const signingBytes = (claim: ReadClaim) => Buffer.from(`durable-harness operator token v1\n${canonicalJson(claim)}`, 'utf8');

/** A read token for `namespaces`, good for `ttlMs` (at most 12 h). */
export function mintReadToken(signer: OperatorSigner, options: { namespaces: readonly string[]; ttlMs: number; nowMs?: number }): string {
  const now = options.nowMs ?? Date.now();
  const claim: ReadClaim = {
    v: 1,
    use: 'read',
    operator: signer.operator,
    keyId: signer.keyId,
    namespaces: [...options.namespaces],
    issuedAt: new Date(now).toISOString(),
    expiresAt: new Date(now + Math.min(options.ttlMs, MAX_READ_TOKEN_TTL_MS)).toISOString(),
  };
  const body = Buffer.from(canonicalJson(claim)).toString('base64url');
  return `${PREFIX}.${body}.${sign(null, signingBytes(claim), signer.key).toString('base64url')}`;
}

/** Whether `text` looks like a read token (else it is a configured static token, or nothing). */
export const isReadToken = (text: string): boolean => text.startsWith(`${PREFIX}.`);

/**
 * The operator and namespaces a read token stands for, or why it does not count (a string). Verified against the
 * operators file as it is now: a key removed from it, or a `read` role taken away, stops its tokens at once.
 */
export function verifyReadToken(text: string, directory: OperatorDirectory, nowMs = Date.now()): { operator: string; namespaces: readonly string[] } | string {
  const [prefix, body, signature, extra] = text.split('.');
  if (prefix !== PREFIX || !body || !signature || extra !== undefined) return 'not an operator token';
  let claim: ReadClaim;
  try {
    claim = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as ReadClaim;
  } catch {
    return 'a malformed operator token';
  }
  if (claim?.v !== 1 || claim.use !== 'read' || !Array.isArray(claim.namespaces)) return 'a malformed operator token';
  const operator = directory.operators.find((o) => o.name === claim.operator);
  const key = operator?.keys.find((k) => k.keyId === claim.keyId);
  if (!operator || !key) return `operator "${String(claim.operator)}" or its key is not configured`;
  let valid = false;
  try {
    valid = verify(null, signingBytes(claim), key.key, Buffer.from(signature, 'base64url'));
  } catch {
    valid = false;
  }
  if (!valid) return `the token of operator "${operator.name}" does not verify`;
  const issued = Date.parse(claim.issuedAt);
  const expires = Date.parse(claim.expiresAt);
  if (!(expires > issued) || expires - issued > MAX_READ_TOKEN_TTL_MS || issued > nowMs + SKEW_MS || nowMs > expires + SKEW_MS) {
    return `the token of operator "${operator.name}" is expired or not yet valid; make a new one with \`durable-harness operator token\``;
  }
  if (!operator.roles.includes('read')) return `operator "${operator.name}" does not have the role "read"`;
  return { operator: operator.name, namespaces: claim.namespaces };
}
