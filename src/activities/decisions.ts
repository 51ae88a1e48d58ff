/**
 * Who decided, verified before anything takes effect. Every operator decision a run receives (approve, deny, reply,
 * retry, abandon, cancel) goes through `authorizeDecision`, a local activity: the workflow cannot do the crypto, and
 * the nonce of a signature must be recorded where every worker sees it (the ledger) so it is accepted once.
 *
 * - A signed decision is verified against the worker's operators file (src/operators) whatever the mode.
 * - An unsigned one is accepted only when both the run (its mode as frozen at its start) and this worker are
 *   `trusted-network`; its principal is then `unauthenticated:<name>`, and status says so.
 *
 * `pendingApprovalsOf` is the other direction: the turn activity's notifications about permission requests carry
 * nothing the workflow trusts; the workflow reads the run's requests from the ledger instead.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/activity';
import { isBlobRef, type TextRef } from '../blobs/index.js';
import type { Ledger } from '../ledger/types.js';
import {
  DecisionRefusals,
  DecisionRefusedError,
  noOperators,
  signHint,
  textDigest,
  verifyDecision,
  type DecisionClaim,
  type DecisionMode,
  type OperatorAction,
  type OperatorDirectory,
  type SignedDecision,
} from '../operators/index.js';
import { DETAILED_PENDING, type ApprovalSettlement, type PendingApprovalView } from '../workflows/approvals.js';
import { pendingViewOf } from './approvals.js';

export interface AuthorizeDecisionInput {
  readonly namespace: string;
  readonly workflowId: string;
  /** The run's first execution run id (the ledger's run). */
  readonly runId: string;
  readonly action: OperatorAction;
  /** approve/deny: the request as the caller named it (the signed claim must name the same). */
  readonly requestId?: string;
  readonly signed?: SignedDecision;
  /** An unsigned caller's name (trusted-network only); recorded as `unauthenticated:<by>`. */
  readonly by?: string;
  /** reply: its text (or its reference into the blob store, keyed by the same digest), whose digest a signed claim names. */
  readonly text?: TextRef;
  /** The run's decision mode, frozen at its start (absent for runs started before modes existed: trusted-network). */
  readonly runMode?: DecisionMode;
}

/** A decision the worker accepted: the parameters to act on come from `claim` when it was signed. */
export interface AuthorizedDecision {
  readonly principal: string;
  readonly keyId?: string;
  readonly authenticated: boolean;
  readonly claim?: DecisionClaim;
}

export interface DecisionDeps {
  readonly ledger: Ledger;
  /** The operators this worker accepts signatures of (re-read on change). */
  readonly operators?: () => OperatorDirectory;
  /** This worker's mode (default `signed`: a library user who configures nothing gets the safe one). */
  readonly decisionMode?: DecisionMode;
  readonly now?: () => number;
}

const unauthenticatedName = (by: string | undefined) => {
  const name = (by ?? '').trim().replace(/^operator:/, '').replace(/[^\w.@:-]/g, '').slice(0, 64);
  return `unauthenticated:${name || 'operator'}`;
};

export function decisionActivities(deps: DecisionDeps) {
  const mode = deps.decisionMode ?? 'signed';
  const operators = deps.operators ?? (() => noOperators);
  const now = deps.now ?? Date.now;

  const refuse = (type: string, message: string): never => {
    throw ApplicationFailure.create({ type, message, nonRetryable: true });
  };

  return {
    /** Verifies (or, in a trusted network, accepts) one operator decision and records it; refuses with a stable type. */
    async authorizeDecision(input: AuthorizeDecisionInput): Promise<AuthorizedDecision> {
      const target = { namespace: input.namespace, workflowId: input.workflowId, runId: input.runId };
      if (input.signed === undefined) {
        const runMode = input.runMode ?? 'trusted-network';
        if (mode === 'signed' || runMode === 'signed') {
          refuse(DecisionRefusals.unsigned, `this deployment accepts only signed operator decisions, and this ${input.action} is not signed: ${signHint}`);
        }
        const principal = unauthenticatedName(input.by);
        await deps.ledger.recordDecision({ nonce: randomUUID(), ...target, action: input.action, ...(input.requestId ? { requestId: input.requestId } : {}), principal, authenticated: false });
        return { principal, authenticated: false };
      }
      let verified;
      try {
        verified = verifyDecision(input.signed, { ...target, action: input.action, ...(input.requestId !== undefined ? { requestId: input.requestId } : {}) }, operators(), now());
      } catch (err) {
        if (err instanceof DecisionRefusedError) refuse(err.type, err.message);
        throw err;
      }
      const { claim } = verified;
      const digest = input.text === undefined ? textDigest('') : isBlobRef(input.text) ? input.text.blob : textDigest(input.text);
      if (input.action === 'reply' && claim.textSha256 !== digest) {
        refuse(DecisionRefusals.mismatch, 'the reply differs from the text that was signed');
      }
      const principal = `operator:${verified.operator}`;
      const { inserted } = await deps.ledger.recordDecision({
        nonce: claim.nonce,
        ...target,
        action: input.action,
        ...(claim.requestId !== undefined ? { requestId: claim.requestId } : {}),
        principal,
        keyId: verified.keyId,
        authenticated: true,
        claim,
      });
      // The nonce was recorded before: by this same decision when this activity runs again (its worker died before
      // the workflow saw the result), else it is a replay. A replay within this run is refused by the workflow
      // itself (it remembers the nonces it acted on); here, anything but the same run, action and request is refused.
      if (!inserted) {
        const earlier = (await deps.ledger.listDecisions(input.workflowId, input.runId)).find((d) => d.nonce === claim.nonce);
        if (!earlier || earlier.action !== input.action || earlier.requestId !== claim.requestId) {
          refuse(DecisionRefusals.replayed, `this signed ${input.action} was used before (nonce ${claim.nonce}); sign a new one`);
        }
      }
      return { principal, keyId: verified.keyId, authenticated: true, claim };
    },

    /**
     * The run's permission requests as the ledger has them: every pending one, and how those in `known` (pending as
     * far as the workflow knew) were settled. What the workflow shows comes from here, never from a signal's payload.
     */
    async pendingApprovalsOf(input: { workflowId: string; runId: string; known: readonly string[] }): Promise<{ pending: PendingApprovalView[]; settled: ApprovalSettlement[] }> {
      const rows = await deps.ledger.listApprovals({ workflowId: input.workflowId, runId: input.runId });
      // Details only for requests the workflow does not have yet, and no more than it keeps: a flood stays small.
      let detailed = 0;
      const pending = rows.filter((r) => r.status === 'pending').map((r) => pendingViewOf(r, undefined, !input.known.includes(r.requestId) && detailed++ < DETAILED_PENDING));
      const settled = rows
        .filter((r) => r.status !== 'pending' && input.known.includes(r.requestId))
        .map((r) => ({ requestId: r.requestId, status: r.status as ApprovalSettlement['status'], by: r.decidedBy ?? r.status }));
      return { pending, settled };
    },
  };
}
