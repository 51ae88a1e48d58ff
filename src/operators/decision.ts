/**
 * A signed operator decision. The operator's command line signs a claim — which run (namespace, workflow id and
 * the run's first execution id), which action, on which request, with which edit, scope, reason or reply, when,
 * and a nonce — and the workflow acts on the claim only after a worker verified it against the operators it was
 * configured with. The decision's parameters are read from the signed claim itself, so nothing can be edited
 * after signing, and the claim names one run, one request and one action, so it cannot be replayed to another.
 */
import { createHash, randomBytes, sign, verify } from 'node:crypto';
import { canonicalJson } from '../permissions/gate.js';
import type { OperatorSigner } from './keys.js';
import type { OperatorDirectory, OperatorRole } from './config.js';

export const operatorActions = ['approve', 'deny', 'reply', 'retry', 'abandon', 'cancel'] as const;
export type OperatorAction = (typeof operatorActions)[number];

/** The role each action needs. */
export const roleOfAction: Readonly<Record<OperatorAction, OperatorRole>> = {
  approve: 'approve',
  deny: 'approve',
  reply: 'operate',
  retry: 'operate',
  abandon: 'operate',
  cancel: 'operate',
};

/** Which run a decision is for. */
export interface DecisionTarget {
  readonly namespace: string;
  readonly workflowId: string;
  /** The run's first execution run id (stays the same across continue-as-new; another run of the id has another). */
  readonly runId: string;
}

/** What the action decides; absent fields are absent from the claim. */
export interface DecisionFields {
  readonly action: OperatorAction;
  /** approve, deny: the permission request. */
  readonly requestId?: string;
  /** approve: fields replacing the tool input's. */
  readonly edit?: Record<string, unknown>;
  /** approve. */
  readonly scope?: 'once' | 'session';
  /** deny (shown to the harness), abandon, cancel. */
  readonly reason?: string;
  /** reply: SHA-256 (hex) of the reply's text, which may travel by reference. */
  readonly textSha256?: string;
}

/** What is signed. */
export interface DecisionClaim extends DecisionTarget, DecisionFields {
  readonly v: 1;
  readonly operator: string;
  readonly keyId: string;
  readonly issuedAt: string;
  readonly expiresAt: string;
  readonly nonce: string;
}

export interface SignedDecision {
  readonly claim: DecisionClaim;
  /** Ed25519 over `signingBytes(claim)`, base64. */
  readonly signature: string;
}

/** How long a signature is good for by default, and at most. */
export const DEFAULT_DECISION_TTL_MS = 5 * 60_000;
export const MAX_DECISION_TTL_MS = 15 * 60_000;
/** Clock difference tolerated between the signer and the worker. */
export const CLOCK_SKEW_MS = 60_000;

/** Why a decision was refused: the stable ApplicationFailure type the update fails with. */
export const DecisionRefusals = {
  /** No signature where the deployment requires one. */
  unsigned: 'DecisionUnsigned',
  /** Malformed claim, or a signature that does not verify (edited after signing, wrong key). */
  invalid: 'DecisionSignatureInvalid',
  /** The operator or key is not configured on the worker. */
  unknown: 'DecisionOperatorUnknown',
  /** The operator lacks the role the action needs. */
  role: 'DecisionRoleMissing',
  /** Outside its validity window. */
  expired: 'DecisionExpired',
  /** Signed for another run, action or request. */
  mismatch: 'DecisionMismatch',
  /** Its nonce was used before. */
  replayed: 'DecisionReplayed',
} as const;
export type DecisionRefusalType = (typeof DecisionRefusals)[keyof typeof DecisionRefusals];

/** A refused decision: the run keeps waiting, the caller learns why. */
export class DecisionRefusedError extends Error {
  override readonly name = 'DecisionRefusedError';
  constructor(
    readonly type: DecisionRefusalType,
    message: string,
  ) {
    super(message);
  }
}

/** The bytes signed: a domain tag and the claim as canonical JSON. */
export function signingBytes(claim: DecisionClaim): Buffer {
  return Buffer.from(`durable-harness operator decision v1\n${canonicalJson(claim)}`, 'utf8');
}

/** SHA-256 hex of a reply's text (what a reply claim names). */
export function textDigest(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** Signs `fields` for `target` with the operator's key. */
export function signDecision(signer: OperatorSigner, target: DecisionTarget, fields: DecisionFields, options: { nowMs?: number; ttlMs?: number } = {}): SignedDecision {
  const now = options.nowMs ?? Date.now();
  const ttl = Math.min(options.ttlMs ?? DEFAULT_DECISION_TTL_MS, MAX_DECISION_TTL_MS);
  const claim: DecisionClaim = {
    v: 1,
    ...target,
    ...definedOnly(fields),
    operator: signer.operator,
    keyId: signer.keyId,
    issuedAt: new Date(now).toISOString(),
    expiresAt: new Date(now + ttl).toISOString(),
    nonce: randomBytes(16).toString('hex'),
  };
  return { claim, signature: sign(null, signingBytes(claim), signer.key).toString('base64') };
}

/** Who a verified decision came from. */
export interface VerifiedPrincipal {
  readonly operator: string;
  readonly keyId: string;
}

/**
 * Verifies a signed decision for `target` and `action` (and `requestId` for approvals) against the configured
 * operators. Throws `DecisionRefusedError` with the reason; returns the principal otherwise. Nonce reuse is the
 * caller's to check (it needs durable state).
 */
export function verifyDecision(
  signed: unknown,
  expected: DecisionTarget & { readonly action: OperatorAction; readonly requestId?: string },
  directory: OperatorDirectory,
  nowMs = Date.now(),
): VerifiedPrincipal & { readonly claim: DecisionClaim } {
  const refuse = (type: DecisionRefusalType, message: string): never => {
    throw new DecisionRefusedError(type, message);
  };
  const s = signed as Partial<SignedDecision> | null | undefined;
  const claim = s?.claim as DecisionClaim | undefined;
  if (!claim || typeof claim !== 'object' || typeof s?.signature !== 'string') return refuse(DecisionRefusals.unsigned, `the ${expected.action} is not signed; ${signHint}`);
  if (claim.v !== 1 || typeof claim.operator !== 'string' || typeof claim.keyId !== 'string' || typeof claim.nonce !== 'string' || !/^[0-9a-f]{32}$/.test(claim.nonce)) {
    return refuse(DecisionRefusals.invalid, 'the signed decision is malformed (v, operator, keyId, nonce)');
  }
  const operator = directory.operators.find((o) => o.name === claim.operator);
  if (!operator) return refuse(DecisionRefusals.unknown, `operator "${claim.operator}" is not configured on this worker (DURABLE_HARNESS_OPERATORS_FILE)`);
  const key = operator.keys.find((k) => k.keyId === claim.keyId);
  if (!key) return refuse(DecisionRefusals.unknown, `key ${claim.keyId} is not one of operator "${claim.operator}"'s configured keys`);
  let valid = false;
  try {
    valid = verify(null, signingBytes(claim), key.key, Buffer.from(s.signature, 'base64'));
  } catch {
    valid = false;
  }
  if (!valid) return refuse(DecisionRefusals.invalid, `the signature of operator "${claim.operator}" does not verify: the decision was changed after signing, or signed with another key`);
  const wrong = (['namespace', 'workflowId', 'runId', 'action'] as const).find((f) => claim[f] !== expected[f]);
  if (wrong) return refuse(DecisionRefusals.mismatch, `the decision was signed for ${wrong} ${JSON.stringify(claim[wrong])}, not ${JSON.stringify(expected[wrong])}`);
  if (expected.requestId !== undefined && claim.requestId !== expected.requestId) {
    return refuse(DecisionRefusals.mismatch, `the decision was signed for request ${JSON.stringify(claim.requestId)}, not ${JSON.stringify(expected.requestId)}`);
  }
  const issued = Date.parse(claim.issuedAt);
  const expires = Date.parse(claim.expiresAt);
  if (!Number.isFinite(issued) || !Number.isFinite(expires) || expires <= issued || expires - issued > MAX_DECISION_TTL_MS) {
    return refuse(DecisionRefusals.invalid, `the decision's validity window is malformed or longer than ${MAX_DECISION_TTL_MS / 60_000} minutes`);
  }
  if (issued > nowMs + CLOCK_SKEW_MS) return refuse(DecisionRefusals.expired, `the decision is dated ${claim.issuedAt}, in the future of this worker's clock`);
  if (nowMs > expires + CLOCK_SKEW_MS) return refuse(DecisionRefusals.expired, `the decision expired at ${claim.expiresAt}; sign it again`);
  const role = roleOfAction[expected.action];
  if (!operator.roles.includes(role)) return refuse(DecisionRefusals.role, `operator "${operator.name}" may not ${expected.action}: that needs the role "${role}" (has ${operator.roles.join(', ') || 'none'})`);
  return { operator: operator.name, keyId: key.keyId, claim };
}

export const signHint = 'sign it with an operator key: `durable-harness <command> … --key FILE` (or DURABLE_HARNESS_OPERATOR_KEY_FILE); make one with `durable-harness operator keygen`';

function definedOnly<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}
