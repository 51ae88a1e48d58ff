/**
 * The permission gate of one turn attempt: the policy decides first, then grants (an exact edit the operator
 * approved, a tool allowed for the session), then a human through the approval broker. Every decision is a row
 * in the ledger's approvals, so the run's record shows who or which rule allowed or denied each tool use.
 *
 * A request's durable id is derived from the turn, the tool and its input, so a retried attempt whose harness
 * asks the same thing finds the same row: a decision made while no worker was waiting still applies, and a
 * pending request keeps its original deadline.
 *
 * A harness can ask thousands of times in one turn, so a decision by a rule costs one ledger write: the grants are
 * read once per attempt (and again only after an operator's decision), a row a retried attempt finds is reused as
 * it is written, and each decision first yields to the event loop so heartbeats, queries and other runs go on.
 * Past `maxRequestsPerTurn` requests are denied at once, with no row and no operator.
 */
import { createHash } from 'node:crypto';
import type { ApprovalLedger, ApprovalRecord } from '../ledger/types.js';
import { answerOf } from './ledger-broker.js';
import { defaultMaxRequestsPerTurn, evaluatePolicy, policyIsInteractive, type PermissionPolicy } from './policy.js';
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
  /** Called for every request denied because the attempt reached the policy's cap (`denied`: how many so far). */
  readonly onOverCap?: (cap: number, denied: number) => void;
}

/** Who denied a request past the cap, as the answer says. */
export const OVER_CAP_DECIDER = 'limit:maxRequestsPerTurn';

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

function overCapMessage(cap: number): string {
  return (
    `Denied without asking: this turn already made ${cap} permission requests, the most this agent allows in one turn ` +
    '(permissions.maxRequestsPerTurn). Ask nothing more in this turn: finish it with your JSON envelope; the next turn may ask again.'
  );
}

/** Lets timers and I/O run (heartbeats, queries, other runs' activities) between two decisions. */
const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Creates the gate for one turn attempt. */
export function createPermissionGate(options: PermissionGateOptions): PermissionGate {
  const { ledger, workflowId, runId, turn, policy, workspace, broker } = options;
  const cap = policy.maxRequestsPerTurn ?? defaultMaxRequestsPerTurn;
  const occurrences = new Map<string, number>();
  let asked = 0;
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

  /** The run's grants (ledger.listGrants), read at the first request and again after an operator grants more. */
  let grants: Promise<readonly ApprovalRecord[]> | undefined;
  const currentGrants = (): Promise<readonly ApprovalRecord[]> => {
    grants ??= ledger.listGrants(workflowId, turn, runId);
    grants.catch(() => (grants = undefined)); // a failed read is tried again at the next request
    return grants;
  };

  /**
   * Writes the decision as the request's row. A row that already existed (a retried attempt) keeps its first
   * decision; one still waiting for an operator is waited for.
   */
  const record = async (request: PermissionRequest, approvalId: string, answer: PermissionAnswer, signal?: AbortSignal): Promise<PermissionAnswer> => {
    const { record: row, created } = await ledger.requestApproval({
      ...stored(request),
      requestId: approvalId,
      decision: {
        status: answer.decision === 'allow' ? 'allowed' : 'denied',
        decidedBy: answer.decidedBy,
        scope: answer.scope,
        ...(answer.message !== undefined ? { message: answer.message } : {}),
      },
    });
    if (created) return answer;
    return answerOf(row) ?? ask(request, approvalId, signal);
  };

  /** An allowed row of this turn whose edited input is exactly what the harness asks now. */
  const editGrant = (rows: readonly ApprovalRecord[], request: PermissionRequest): ApprovalRecord | undefined =>
    rows.find((row) => {
      if (row.editedInput === undefined || row.tool !== redact(request.tool) || row.turn !== turn) return false;
      const edited = row.editedInput as { command?: unknown } | undefined;
      if (request.kind === 'command' && typeof edited?.command === 'string' && request.command !== undefined) {
        return edited.command.trim() === request.command.trim();
      }
      return canonicalJson(row.editedInput) === canonicalJson(request.input);
    });

  const sessionGrant = (rows: readonly ApprovalRecord[], request: PermissionRequest): ApprovalRecord | undefined =>
    rows.find((row) => row.scope === 'session' && row.tool === redact(request.tool) && row.kind === request.kind);

  async function decide(request: PermissionRequest, signal?: AbortSignal): Promise<PermissionAnswer> {
    const base = approvalIdFor(turn, request);
    const n = (occurrences.get(base) ?? 0) + 1;
    occurrences.set(base, n);
    const approvalId = approvalIdFor(turn, request, n);

    const verdict = evaluatePolicy(policy, request, workspace);
    if (verdict.outcome === 'deny') return record(request, approvalId, { decision: 'deny', scope: 'once', decidedBy: verdict.by, message: denialMessage(verdict.by), approvalId }, signal);
    const held = await currentGrants();
    const edit = editGrant(held, request);
    if (edit) return record(request, approvalId, { decision: 'allow', scope: 'once', decidedBy: `edit-of:${edit.requestId}`, approvalId }, signal);
    if (verdict.outcome === 'allow') return record(request, approvalId, { decision: 'allow', scope: 'once', decidedBy: verdict.by, approvalId }, signal);
    const grant = verdict.by === 'posture:strict' ? sessionGrant(held, request) : undefined;
    if (grant) return record(request, approvalId, { decision: 'allow', scope: 'once', decidedBy: `session-grant:${grant.requestId}`, approvalId }, signal);
    // Decided by an operator in an earlier attempt: the answer stands, nobody is asked (or told) again.
    const existing = await ledger.getApproval(workflowId, approvalId, runId);
    return (existing && answerOf(existing)) ?? ask(request, approvalId, signal);
  }

  async function ask(request: PermissionRequest, approvalId: string, signal?: AbortSignal): Promise<PermissionAnswer> {
    await options.onAsk?.(request, approvalId);
    const answer = await broker.ask({ ...stored(request), requestId: approvalId, timeoutMs: policy.approvalTimeoutMs }, signal);
    // An operator who allowed more than this request (the session, an edit) changed the grants.
    if (answer.decision === 'allow' && (answer.scope === 'session' || answer.editedInput !== undefined)) grants = undefined;
    // The operator's edit is a patch of the tool input; the harness gets the whole edited input.
    if (answer.decision === 'allow' && answer.editedInput !== undefined) return { ...answer, editedInput: applyEdit(request.input, answer.editedInput) };
    return answer;
  }

  return {
    interactive: policyIsInteractive(policy),
    async decide(request, signal) {
      await yieldToEventLoop();
      asked += 1;
      let answer: PermissionAnswer;
      if (asked > cap) {
        answer = { decision: 'deny', scope: 'once', decidedBy: OVER_CAP_DECIDER, message: overCapMessage(cap) };
        options.onOverCap?.(cap, asked - cap);
      } else {
        try {
          answer = await decide(request, signal);
        } catch (error) {
          if (signal?.aborted) throw error;
          // Fail closed: a broken ledger or broker never lets a tool run.
          const reason = error instanceof Error ? error.message : String(error);
          answer = { decision: 'deny', scope: 'once', decidedBy: 'error', message: `The permission check failed (${reason}); denied.` };
        }
      }
      await Promise.resolve(options.onDecision?.(request, answer)).catch(() => undefined);
      return answer;
    },
  };
}
