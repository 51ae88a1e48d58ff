/**
 * Pending permission requests as the workflow shows them: pure functions of `RunState` (no Temporal calls).
 *
 * How the workflow learns of them: the turn activity signals its own run (`approvalRequested`) when the gate hands
 * a request to a human, and again (`approvalSettled`) when the request is decided — by an operator, the timeout, or
 * the ledger saying it was decided elsewhere. Signals are durable (one history event each, only when something
 * happens) and need no polling timer; the ledger stays the authority for the decision itself.
 */
import { escapeControl, escapeText } from '../contracts/visible-text.js';
import { DETAIL_CHARS } from '../permissions/detail.js';
import { codeBlock, inlineCode, progressLine, type TurnProgressNote } from './progress.js';
import type { RunState } from './state.js';

/** One request waiting for an operator, as status, the Temporal UI and `durable-harness approvals` show it. */
export interface PendingApprovalView {
  /** The durable id within the run (`t<turn>-<hash>`): what `approve|deny RUN REQUEST` names. */
  readonly requestId: string;
  readonly turn: number;
  readonly tool: string;
  readonly kind: string;
  /** One line for humans (redacted like every harness string). */
  readonly title: string;
  /** When it was first asked (ISO). */
  readonly since: string;
  /** Denied by timeout this long after `since` (ms). */
  readonly timeoutMs: number;
  /**
   * What it would do: a write's content, an edit's diff, a command's argv and working directory (bounded, control
   * characters escaped; src/permissions/detail.ts). Kept for the first `DETAILED_PENDING` pending requests only.
   */
  readonly detail?: string;
}

/** A request that left the pending list: who decided, for the reason an approve/deny of it is refused. */
export interface SettledApprovalView {
  readonly requestId: string;
  readonly status: string;
  readonly by: string;
}

/** How a settled request is reported by the turn activity (or the update that decided it). */
export interface ApprovalSettlement {
  readonly requestId: string;
  readonly status: 'allowed' | 'denied' | 'expired';
  readonly by: string;
}

/** How many settled requests the state remembers (newest last), so a second decision is refused with who made the first. */
export const SETTLED_KEPT = 20;
/** How many pending requests details and status show in full; the count is always exact. */
const TITLE_CHARS = 160;
/** How many pending requests keep their detail at once (the first asked): what a flood of requests can weigh in state. */
export const DETAILED_PENDING = 8;
/** A detail as the state keeps it at most: the activity's bound and its "… N more bytes". */
const KEPT_DETAIL_CHARS = DETAIL_CHARS + 64;

export const pendingOf = (state: RunState): readonly PendingApprovalView[] => state.pendingApprovals ?? [];

/** A request is pending: added once (a retried attempt asking it again changes nothing). */
export function approvalRequested(state: RunState, view: PendingApprovalView): RunState {
  const pending = pendingOf(state);
  if (pending.some((p) => p.requestId === view.requestId)) return state;
  // A late signal of a turn that already ended: its requests were expired with it.
  if (view.turn < state.iteration) return state;
  if ((state.settledApprovals ?? []).some((s) => s.requestId === view.requestId)) return state;
  const title = view.title.length > TITLE_CHARS ? `${view.title.slice(0, TITLE_CHARS)}…` : view.title;
  const { detail, ...rest } = view;
  const kept = typeof detail === 'string' && pending.filter((p) => p.detail !== undefined).length < DETAILED_PENDING ? { detail: detail.slice(0, KEPT_DETAIL_CHARS) } : {};
  return { ...state, pendingApprovals: [...pending, { ...rest, title, ...kept }] };
}

/** A request was decided: it leaves the pending list and is remembered as settled. */
export function approvalSettled(state: RunState, settled: ApprovalSettlement): RunState {
  const pending = pendingOf(state);
  const known = (state.settledApprovals ?? []).some((s) => s.requestId === settled.requestId);
  if (known && !pending.some((p) => p.requestId === settled.requestId)) return state;
  return {
    ...state,
    pendingApprovals: pending.filter((p) => p.requestId !== settled.requestId),
    settledApprovals: [...(state.settledApprovals ?? []).filter((s) => s.requestId !== settled.requestId), { requestId: settled.requestId, status: settled.status, by: settled.by }].slice(
      -SETTLED_KEPT,
    ),
  };
}

/**
 * A turn finished: its requests nobody decided were expired in the ledger by the turn activity (its harness no
 * longer asks them), so they leave the list. A failed turn keeps them: a retry asks them again.
 */
export function approvalsOfTurnEnded(state: RunState, turn: number): RunState {
  const pending = pendingOf(state);
  if (!pending.some((p) => p.turn <= turn)) return state;
  return settleAll(state, pending.filter((p) => p.turn <= turn), 'turn ended without asking it again');
}

/** The run ended: every request still pending was expired in the ledger by endSession. */
export function approvalsOfRunEnded(state: RunState, status: string): RunState {
  const pending = pendingOf(state);
  return pending.length === 0 ? state : settleAll(state, pending, `run ${status}`);
}

function settleAll(state: RunState, which: readonly PendingApprovalView[], by: string): RunState {
  return which.reduce((s, p) => approvalSettled(s, { requestId: p.requestId, status: 'expired', by }), state);
}

/**
 * Why an operator's decision on `requestId` cannot be taken, or undefined when it can. The validator of the
 * approve/deny updates: an unknown or already decided request is rejected before anything is written.
 */
export function decisionRefusal(state: RunState, requestId: unknown, edit?: unknown, allow = true): string | undefined {
  if (typeof requestId !== 'string' || !requestId.trim()) return 'name the permission request to decide (its id, e.g. t3-1a2b3c4d5e)';
  if (pendingOf(state).some((p) => p.requestId === requestId)) {
    if (edit !== undefined && !allow) return 'an edited input only goes with an approval, not a denial';
    if (edit !== undefined && (edit === null || typeof edit !== 'object' || Array.isArray(edit))) return 'the edited input must be a JSON object (fields replacing the tool input\'s fields)';
    return undefined;
  }
  const settled = (state.settledApprovals ?? []).find((s) => s.requestId === requestId);
  if (settled) return `permission request "${requestId}" is already ${settled.status} (by ${settled.by})`;
  const open = pendingOf(state).map((p) => p.requestId);
  return `run has no pending permission request "${requestId}" (pending: ${open.length ? open.join(', ') : 'none'})`;
}

/**
 * The Temporal UI's current details: the phase line (with the turn in flight, from its last progress note), then
 * one line per pending request and what it would do. Harness text is escaped and set as code: it renders as text.
 */
export function detailsText(state: RunState, inFlight?: { readonly note: TurnProgressNote; readonly at: number }): string {
  const turn = inFlight && state.state === 'running' ? `\n\n${progressLine(inFlight.note, inFlight.at)}` : '';
  const head = `**${state.state}** · ${state.detail}${turn}`;
  const pending = pendingOf(state);
  const lines = pending.map((p) => {
    // Tool and title are harness text: as code, a title like `![](https://…)` stays text (no image fetched, no link).
    const line = `- \`${p.requestId}\` (turn ${p.turn}) ${p.kind} · ${inlineCode(escapeControl(p.tool))}: ${inlineCode(escapeControl(p.title))} — since ${p.since}, denied after ${Math.round(p.timeoutMs / 1000)} s`;
    return p.detail === undefined ? line : `${line}\n\n${codeBlock(escapeText(p.detail))}\n`;
  });
  const enforcement = state.policy?.permissions && !state.policy.permissions.enforced ? `\n\npermissions: ${state.policy.permissions.posture} **advisory** (not enforced: ${state.policy.permissions.note ?? 'the harness cannot ask'})` : '';
  const unsigned = state.policy?.decisions === 'trusted-network' ? '\n\ndecisions: **not authenticated** (trusted-network: whoever reaches Temporal decides)' : '';
  const refused = state.networkRefused ? `\n\nnetwork: **${state.networkRefused} request${state.networkRefused === 1 ? '' : 's'} refused** by the run's egress gateway (\`durable-harness network RUN --refused\`)` : '';
  const reads = state.loopbackReads ? `\n\nloopback: ${state.loopbackReads} MCP read${state.loopbackReads === 1 ? '' : 's'} of the run's data (\`durable-harness network RUN --loopback\`)` : '';
  const open = (state.policy?.network === 'open' ? '\n\nnetwork: **open** (unconfined: development only; the sandbox reaches whatever its host reaches)' : '') + refused + reads;
  if (lines.length === 0) return head + enforcement + unsigned + open;
  return `${head}${enforcement}${unsigned}${open}\n\n**${lines.length} permission request${lines.length === 1 ? '' : 's'} waiting** (\`durable-harness approve|deny RUN REQUEST\`):\n${lines.join('\n')}`;
}

/** `approve` update options. */
export interface ApproveOptions {
  /** Fields that replace the tool input's fields (`{"command": "ls -la"}`). */
  readonly edit?: Record<string, unknown>;
  /** `session`: the same tool is allowed for the rest of the run. */
  readonly scope?: 'once' | 'session';
  /** Who decides (recorded as `operator:<by>`; default `operator`). */
  readonly by?: string;
}

/** `deny` update options. */
export interface DenyOptions {
  /** Shown to the harness. */
  readonly reason?: string;
  readonly by?: string;
}

/** What the approve/deny updates return: the ledger row as decided. */
export interface ApprovalDecisionResult {
  readonly requestId: string;
  readonly status: 'allowed' | 'denied';
  readonly decidedBy: string;
  readonly editedInput?: unknown;
}

/**
 * How many full approval waits one turn attempt's Temporal timeout covers, beyond the harness's own turn timeout
 * (which the adapters pause while a request waits). A wait that would still reach the attempt's limit is denied
 * as a timeout by the turn activity itself, a margin before Temporal would time the attempt out.
 */
export const APPROVAL_WAITS_PER_TURN = 3;

/** The turn activity's start-to-close timeout: the harness's turn, the approval waits it may hold, and a minute of slack. */
export function turnStartToCloseMs(policy: { readonly turnTimeoutMs: number; readonly approvalTimeoutMs?: number }): number {
  return policy.turnTimeoutMs + APPROVAL_WAITS_PER_TURN * (policy.approvalTimeoutMs ?? 0) + 60_000;
}
