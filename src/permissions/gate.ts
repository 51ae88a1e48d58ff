/**
 * The permission gate of one turn attempt: the policy decides first, then grants (an exact edit the operator
 * approved, a tool allowed for the session), then a human through the approval broker. Every decision is a row
 * in the ledger's approvals, so the run's record shows who or which rule allowed or denied each tool use.
 *
 * A request's durable id is derived from the turn, the tool and its input, so a retried attempt whose harness
 * asks the same thing finds the same row: a decision made while no worker was waiting still applies, and a
 * pending request keeps its original deadline.
 */
import { createHash } from 'node:crypto';
import type { ApprovalLedger, ApprovalRecord } from '../ledger/types.js';
import { answerOf } from './ledger-broker.js';
import { evaluatePolicy, policyIsInteractive, type PermissionPolicy } from './policy.js';
import type { ApprovalBroker, PermissionAnswer, PermissionGate, PermissionRequest } from './types.js';

export interface PermissionGateOptions {
  readonly ledger: ApprovalLedger;
  readonly workflowId: string;
  /** The ledger run (the run's first execution run id): grants and decisions of another run never apply. */
  readonly runId?: string;
  readonly turn: number;
  readonly policy: PermissionPolicy;
  /** The workspace as the harness sees it: relative path rules are relative to it. */
  readonly workspace: string;
  readonly broker: ApprovalBroker;
  /**
   * Applied to everything of a request that is stored or shown (tool, title, input, command, paths): these are
   * harness strings, and a harness may echo a secret into any of them. The policy decides on the request as asked.
   */
  readonly redact?: (text: string) => string;
  /** Called after every decision (for progress and events); errors are ignored. */
  readonly onDecision?: (request: PermissionRequest, answer: PermissionAnswer) => void | Promise<void>;
  /** Called when a request goes to the broker (for progress: "waiting for approval …"). */
  readonly onAsk?: (request: PermissionRequest, approvalId: string) => void | Promise<void>;
}

/** JSON with sorted keys: the same input always gives the same text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value as object).sort().map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]));
  }
  return value;
}

/** The request's id within its turn: `t<turn>-<10 hex of tool+input>`, `-2`, `-3` … for repeats in one attempt. */
export function approvalIdFor(turn: number, request: Pick<PermissionRequest, 'tool' | 'input'>, occurrence = 1): string {
  const hash = createHash('sha256').update(`${request.tool}\n${canonicalJson(request.input)}`).digest('hex').slice(0, 10);
  return occurrence > 1 ? `t${turn}-${hash}-${occurrence}` : `t${turn}-${hash}`;
}

/**
 * An operator's edit: an object patches the tool input's fields (`{"command":"ls"}` keeps the other fields),
 * anything else replaces the input.
 */
export function applyEdit(input: unknown, edit: unknown): unknown {
  const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
  return isObject(input) && isObject(edit) ? { ...input, ...edit } : edit;
}

function denialMessage(by: string): string {
  return `Denied by the agent's permission policy (${by}). Do not retry it; continue without it or explain in your envelope.`;
}

/** Creates the gate for one turn attempt. */
export function createPermissionGate(options: PermissionGateOptions): PermissionGate {
  const { ledger, workflowId, runId, turn, policy, workspace, broker } = options;
  const occurrences = new Map<string, number>();
  const redact = options.redact ?? ((text: string) => text);
  const scrub = (value: unknown): unknown => JSON.parse(redact(JSON.stringify(value ?? null))) as unknown;
  /** The request as stored: redacted. */
  const stored = (request: PermissionRequest) => ({
    workflowId,
    ...(runId !== undefined ? { runId } : {}),
    turn,
    tool: redact(request.tool),
    kind: request.kind,
    title: redact(request.title),
    input: scrub(request.input),
    ...(request.command !== undefined ? { command: redact(request.command) } : {}),
    ...(request.paths ? { paths: request.paths.map(redact) } : {}),
  });

  const record = async (request: PermissionRequest, approvalId: string, answer: PermissionAnswer): Promise<PermissionAnswer> => {
    const { record: row } = await ledger.requestApproval({
      ...stored(request),
      requestId: approvalId,
      decision: {
        status: answer.decision === 'allow' ? 'allowed' : 'denied',
        decidedBy: answer.decidedBy,
        scope: answer.scope,
        ...(answer.message !== undefined ? { message: answer.message } : {}),
      },
    });
    // A row that already existed (a retried attempt) keeps its first decision.
    return answerOf(row) ?? answer;
  };

  /** An allowed row of this run whose edited input is exactly what the harness asks now. */
  const editGrant = (rows: readonly ApprovalRecord[], request: PermissionRequest): ApprovalRecord | undefined =>
    rows.find((row) => {
      if (row.status !== 'allowed' || row.editedInput === undefined || row.tool !== redact(request.tool) || row.turn !== turn) return false;
      const edited = row.editedInput as { command?: unknown } | undefined;
      if (request.kind === 'command' && typeof edited?.command === 'string' && request.command !== undefined) {
        return edited.command.trim() === request.command.trim();
      }
      return canonicalJson(row.editedInput) === canonicalJson(request.input);
    });

  const sessionGrant = (rows: readonly ApprovalRecord[], request: PermissionRequest): ApprovalRecord | undefined =>
    rows.find((row) => row.status === 'allowed' && row.scope === 'session' && row.tool === redact(request.tool) && row.kind === request.kind);

  async function decide(request: PermissionRequest, signal?: AbortSignal): Promise<PermissionAnswer> {
    const base = approvalIdFor(turn, request);
    const n = (occurrences.get(base) ?? 0) + 1;
    occurrences.set(base, n);
    const approvalId = approvalIdFor(turn, request, n);

    const existing = await ledger.getApproval(workflowId, approvalId, runId);
    if (existing) {
      const answer = answerOf(existing);
      if (answer) return answer;
      if (existing.status === 'pending') return ask(request, approvalId, signal);
    }

    const verdict = evaluatePolicy(policy, request, workspace);
    if (verdict.outcome === 'deny') return record(request, approvalId, { decision: 'deny', scope: 'once', decidedBy: verdict.by, message: denialMessage(verdict.by), approvalId });
    const allowed = await ledger.listApprovals({ workflowId, ...(runId !== undefined ? { runId } : {}), status: 'allowed' });
    const edit = editGrant(allowed, request);
    if (edit) return record(request, approvalId, { decision: 'allow', scope: 'once', decidedBy: `edit-of:${edit.requestId}`, approvalId });
    if (verdict.outcome === 'ask') {
      const grant = verdict.by === 'posture:strict' ? sessionGrant(allowed, request) : undefined;
      if (grant) return record(request, approvalId, { decision: 'allow', scope: 'once', decidedBy: `session-grant:${grant.requestId}`, approvalId });
      return ask(request, approvalId, signal);
    }
    return record(request, approvalId, { decision: 'allow', scope: 'once', decidedBy: verdict.by, approvalId });
  }

  async function ask(request: PermissionRequest, approvalId: string, signal?: AbortSignal): Promise<PermissionAnswer> {
    await options.onAsk?.(request, approvalId);
    const answer = await broker.ask({ ...stored(request), requestId: approvalId, timeoutMs: policy.approvalTimeoutMs }, signal);
    // The operator's edit is a patch of the tool input; the harness gets the whole edited input.
    if (answer.decision === 'allow' && answer.editedInput !== undefined) return { ...answer, editedInput: applyEdit(request.input, answer.editedInput) };
    return answer;
  }

  return {
    interactive: policyIsInteractive(policy),
    async decide(request, signal) {
      let answer: PermissionAnswer;
      try {
        answer = await decide(request, signal);
      } catch (error) {
        if (signal?.aborted) throw error;
        // Fail closed: a broken ledger or broker never lets a tool run.
        const reason = error instanceof Error ? error.message : String(error);
        answer = { decision: 'deny', scope: 'once', decidedBy: 'error', message: `The permission check failed (${reason}); denied.` };
      }
      await Promise.resolve(options.onDecision?.(request, answer)).catch(() => undefined);
      return answer;
    },
  };
}
