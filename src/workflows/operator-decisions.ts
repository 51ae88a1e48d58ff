/**
 * Operator decisions as the workflow takes them: every approve, deny, reply, retry, abandon and cancel is
 * authorized by a worker (`authorizeDecision`, a local activity: signatures, operators, the deployment's mode) before
 * it takes effect, and acts on the parameters the operator signed, never on the ones beside the signature. A
 * signature is used once: the run remembers the nonces it acted on until they expire (and the ledger refuses a
 * nonce another run used).
 */
import { ActivityFailure, ApplicationFailure, proxyLocalActivities, workflowInfo } from '@temporalio/workflow';
import type { AuthorizedDecision } from '../activities/decisions.js';
import type { createActivities } from '../activities/index.js';
import type { DecisionMode, OperatorAction, SignedDecision } from '../operators/index.js';
import type { RunState } from './state.js';
import type { TextRef } from './types.js';

type Activities = ReturnType<typeof createActivities>;

const { authorizeDecision } = proxyLocalActivities<Activities>({
  startToCloseTimeout: '30s',
  retry: {
    maximumAttempts: 3,
    initialInterval: '500ms',
    nonRetryableErrorTypes: ['DecisionUnsigned', 'DecisionSignatureInvalid', 'DecisionOperatorUnknown', 'DecisionRoleMissing', 'DecisionExpired', 'DecisionMismatch', 'DecisionReplayed'],
  },
});

/** A decision as it arrives: what it asks, and the signature over it if there is one. */
export interface DecisionRequest {
  readonly requestId?: string;
  readonly edit?: Record<string, unknown>;
  readonly scope?: 'once' | 'session';
  readonly reason?: string;
  /** reply: the text, or its reference into the blob store when it is long. */
  readonly text?: TextRef;
  /** An unsigned caller's name (trusted-network deployments record it as unauthenticated). */
  readonly by?: string;
  readonly signed?: SignedDecision;
}

/** A decision the run may act on: who made it, and the parameters to act on. */
export interface TakenDecision extends DecisionRequest {
  readonly principal: string;
  readonly authenticated: boolean;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The decision an update's arguments carry: one object (`{requestId, edit, scope, reason, text, by, signed}`, what
 * the Temporal UI can send and the client sends), or the positional forms of older clients — approve/deny
 * `(requestId, options)`, reply `(text)`, abandon `(reason)`. With a signature, only what it signed counts.
 */
export function decisionRequest(action: OperatorAction, args: readonly unknown[]): DecisionRequest {
  const [first, second] = args;
  let base: DecisionRequest = {};
  // A reply by reference is an object too: `{blob, bytes, preview}`.
  if (action === 'reply' && isObject(first) && typeof first.blob === 'string') base = { text: first as unknown as TextRef };
  else if (isObject(first)) base = first as DecisionRequest;
  else if (typeof first === 'string') {
    if (action === 'approve' || action === 'deny') base = { ...(isObject(second) ? (second as DecisionRequest) : {}), requestId: first };
    else if (action === 'reply') base = { text: first };
    else base = { reason: first };
  }
  const claim = base.signed?.claim;
  if (!claim) return base;
  return {
    signed: base.signed,
    ...(base.text !== undefined ? { text: base.text } : {}),
    ...(claim.requestId !== undefined ? { requestId: claim.requestId } : {}),
    ...(claim.edit !== undefined ? { edit: claim.edit } : {}),
    ...(claim.scope !== undefined ? { scope: claim.scope } : {}),
    ...(claim.reason !== undefined ? { reason: claim.reason } : {}),
  };
}

/** How many used nonces a run keeps at most (each only until its signature expires). */
const NONCES_KEPT = 200;

/** Whether the run acted on this signature already. */
export function nonceUsed(state: RunState, signed: SignedDecision | undefined): boolean {
  return signed !== undefined && (state.decisionNonces ?? []).some((n) => n.nonce === signed.claim.nonce);
}

/** The state with this signature's nonce remembered and the expired ones forgotten. */
export function withNonce(state: RunState, signed: SignedDecision, nowMs: number): RunState {
  const kept = (state.decisionNonces ?? []).filter((n) => Date.parse(n.expiresAt) + 120_000 > nowMs);
  return { ...state, decisionNonces: [...kept, { nonce: signed.claim.nonce, expiresAt: signed.claim.expiresAt }].slice(-NONCES_KEPT) };
}

/** The run's decision mode (runs resolved before modes existed took unsigned decisions). */
export const decisionModeOf = (state: RunState): DecisionMode => state.policy?.decisions ?? 'trusted-network';

export interface DecisionHost {
  state(): RunState;
  update(next: RunState): void;
}

/**
 * Authorizes one decision: the taken decision, or a refusal as an ApplicationFailure with the reason (the update
 * fails, nothing changes, the run keeps waiting).
 */
export async function takeDecision(host: DecisionHost, action: OperatorAction, request: DecisionRequest): Promise<TakenDecision> {
  if (nonceUsed(host.state(), request.signed)) {
    throw ApplicationFailure.create({ type: 'DecisionReplayed', message: `this signed ${action} was used before in this run; sign a new one`, nonRetryable: true });
  }
  const info = workflowInfo();
  let authorized: AuthorizedDecision;
  try {
    authorized = await authorizeDecision({
      namespace: info.namespace,
      workflowId: info.workflowId,
      runId: info.firstExecutionRunId,
      action,
      ...(request.requestId !== undefined ? { requestId: request.requestId } : {}),
      ...(request.signed !== undefined ? { signed: request.signed } : {}),
      ...(request.by !== undefined ? { by: request.by } : {}),
      ...(request.text !== undefined ? { text: request.text } : {}),
      runMode: decisionModeOf(host.state()),
    });
  } catch (err) {
    const cause = err instanceof ActivityFailure && err.cause instanceof ApplicationFailure ? err.cause : undefined;
    if (cause) throw ApplicationFailure.create({ type: cause.type ?? 'DecisionRefused', message: cause.message, nonRetryable: true });
    throw err;
  }
  if (request.signed) host.update(withNonce(host.state(), request.signed, Date.now()));
  return { ...request, principal: authorized.principal, authenticated: authorized.authenticated };
}
