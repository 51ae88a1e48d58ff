/** The permission gate and the approval broker: how requests are decided (the words are in src/contracts/permissions.ts). */
import type { EditSupport, PermissionAnswer, PermissionKind, PermissionRequest, PermissionScope } from '../contracts/permissions.js';

export type { EditSupport, PermissionAnswer, PermissionKind, PermissionRequest, PermissionScope };

/** Decides permission requests for one turn: the policy first, then a human through the approval broker. */
export interface PermissionGate {
  /**
   * Whether anything can be denied or asked under this policy. Adapters with a two-way mode use it only then;
   * otherwise they keep their one-way JSON mode (nothing to ask).
   */
  readonly interactive: boolean;
  /** Decides; never throws for a policy or broker failure (fails closed: deny). Rejects only when `signal` aborts. */
  decide(request: PermissionRequest, signal?: AbortSignal): Promise<PermissionAnswer>;
}

/** A request the policy left open, as the broker stores it. */
export interface PendingApproval {
  readonly workflowId: string;
  /** The ledger run; absent = the latest run of `workflowId`. */
  readonly runId?: string;
  /** Durable id within the run: the same request asked again (a retried attempt) gets the same id. */
  readonly requestId: string;
  readonly turn: number;
  readonly tool: string;
  readonly kind: PermissionKind;
  readonly title: string;
  readonly input: unknown;
  readonly command?: string;
  readonly paths?: readonly string[];
  /** Give up and deny this long after the request was FIRST made (not per attempt). */
  readonly timeoutMs: number;
}

/** The human side: what the turn activity awaits for a request the policy left open. */
export interface ApprovalBroker {
  /** Resolves with the decision; a timeout resolves as a denial. Rejects when `signal` aborts. */
  ask(request: PendingApproval, signal?: AbortSignal): Promise<PermissionAnswer>;
}
