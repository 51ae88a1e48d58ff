/**
 * Row ↔ record mapping shared by the SQLite and PostgreSQL ledgers. Both schemas use the same table and column
 * names; only the drivers' value types differ (SQLite: 0/1 and ISO text; node-postgres: booleans, Date for
 * TIMESTAMPTZ and strings for BIGINT), so the helpers below accept either and a record reads the same from both.
 * How an attempt's calls fold into its prompt-run view (usage, cost) is here too, so both ledgers count alike.
 */
import type { Usage } from '../contracts/usage.js';
import { addUsage, noUsage, usageKnown } from '../contracts/usage.js';
import { attemptCost } from '../contracts/cost.js';
import type {
  DecisionView,
  ApprovalDecisionInput,
  ApprovalRecord,
  ApprovalStatus,
  AttemptStatus,
  LedgerEvent,
  NewApproval,
  PromptRunRecord,
  RunStatus,
  RunStepRecord,
  RunView,
} from './types.js';

/** Default and maximum page size for readEvents (the maximum also bounds listApprovals). */
export const DEFAULT_EVENT_PAGE = 100;
const MAX_EVENT_PAGE = 1000;

/** A requested page size as both ledgers take it: a whole number from 1 to the maximum (the default). */
export function pageSize(limit: number = MAX_EVENT_PAGE): number {
  return Math.max(1, Math.min(MAX_EVENT_PAGE, Math.floor(limit)));
}

/** A row as either driver returns it. */
export type Row = Record<string, unknown>;

export function toJson(value: unknown): string {
  return JSON.stringify(value ?? null);
}

export function fromJson(text: unknown): unknown {
  return text === null || text === undefined ? null : (JSON.parse(text as string) as unknown);
}

const str = (v: unknown): string => v as string;
/** BIGINT arrives as a string from node-postgres. */
const num = (v: unknown): number => Number(v);
/** A nullable count: NULL is unknown (undefined), never zero. */
const count = (v: unknown): number | undefined => (v === null || v === undefined ? undefined : Number(v));
/** SQLite stores booleans as 0/1. */
const bool = (v: unknown): boolean => v === true || v === 1;
/** TIMESTAMPTZ arrives as a Date; SQLite keeps the ISO text it was given. */
const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : str(v));
/** `{ [key]: value }` when the column is not NULL, else nothing, so absent fields stay absent (not undefined). */
function opt<K extends string, V>(key: K, v: unknown, map: (v: unknown) => V): { [P in K]?: V } {
  return (v === null || v === undefined ? {} : { [key]: map(v) }) as { [P in K]?: V };
}

export function runFromRow(r: Row): RunView {
  return {
    workflowId: str(r.workflow_id),
    runId: str(r.run_id),
    agent: str(r.agent),
    harness: str(r.harness),
    tenantId: str(r.tenant_id),
    userId: str(r.user_id),
    task: str(r.task),
    ...opt('parentWorkflowId', r.parent_workflow_id, str),
    status: r.status as RunStatus,
    result: fromJson(r.result_json),
    ...opt('externalSessionId', r.external_session_id, str),
    startedAt: iso(r.started_at),
    ...opt('finishedAt', r.finished_at, iso),
  };
}

/**
 * The usage of one `model_calls` row: NULL columns are unknown fields. Read as stored: the bound on a report
 * (`usageOf`) applied when the row was written; the ledger keeps any count it was given.
 */
export function callUsage(r: Row): Usage {
  const fields = { input: r.input_tokens, output: r.output_tokens, cacheRead: r.cache_read_tokens, cacheWrite: r.cache_write_tokens, reasoning: r.reasoning_tokens };
  return Object.fromEntries(Object.entries(fields).flatMap(([k, v]) => (count(v) === undefined ? [] : [[k, count(v)]]))) as Usage;
}

/** The column values of a usage row's counts: unknown is NULL, not 0. */
export function usageColumns(u: Usage) {
  return {
    input: u.input ?? null,
    output: u.output ?? null,
    cacheRead: u.cacheRead ?? null,
    cacheWrite: u.cacheWrite ?? null,
    reasoning: u.reasoning ?? null,
  };
}

/**
 * Prompt-run views from `attempts` rows (in order) and their `model_calls` rows: each attempt's usage is the sum
 * of its calls, and its cost follows the one cost rule (src/ledger/cost.ts).
 */
export function promptRunsFromRows(attempts: readonly Row[], calls: readonly Row[]): PromptRunRecord[] {
  const byAttempt = new Map<string, Row[]>();
  for (const c of calls) {
    const id = str(c.attempt_id);
    const list = byAttempt.get(id);
    if (list) list.push(c);
    else byAttempt.set(id, [c]);
  }
  return attempts.map((a) => {
    const own = byAttempt.get(str(a.attempt_id)) ?? [];
    const cost = attemptCost(
      own.map((c) => ({ priceUsd: count(c.price_usd), harnessCostUsd: count(c.harness_cost_usd), unknown: !usageKnown(callUsage(c)) })),
      { priced: bool(a.priced), usageMissing: bool(a.usage_missing) },
    );
    return {
      workflowId: str(a.workflow_id),
      runId: str(a.run_id),
      turn: num(a.turn),
      attempt: num(a.attempt),
      attemptId: str(a.attempt_id),
      status: a.status as AttemptStatus,
      outputUsed: bool(a.output_used),
      promptId: str(a.prompt_id),
      modelId: str(a.model_id),
      vendorId: str(a.vendor_id),
      ...opt('reportedModel', a.reported_model, str),
      usage: own.reduce((sum, c) => addUsage(sum, callUsage(c)), noUsage),
      calls: own.length,
      ...cost,
      ...opt('externalSessionId', a.external_session_id, str),
      resumed: bool(a.resumed),
      durationMs: num(a.duration_ms),
      input: str(a.input),
      output: str(a.output),
      ...opt('error', a.error, str),
    };
  });
}

export function stepFromRow(r: Row): RunStepRecord {
  return { workflowId: str(r.workflow_id), runId: str(r.run_id), seq: num(r.seq), turn: num(r.turn), type: str(r.type), payload: fromJson(r.payload_json) };
}

export function eventFromRow(r: Row): LedgerEvent {
  return {
    cursor: num(r.cursor),
    workflowId: str(r.workflow_id),
    runId: str(r.run_id),
    turn: num(r.turn),
    type: str(r.type),
    data: fromJson(r.data_json),
    at: iso(r.at),
  };
}

export function approvalFromRow(r: Row): ApprovalRecord {
  return {
    workflowId: str(r.workflow_id),
    runId: str(r.run_id),
    requestId: str(r.request_id),
    turn: num(r.turn),
    tool: str(r.tool),
    kind: str(r.kind),
    title: str(r.title),
    input: fromJson(r.input_json),
    ...opt('command', r.command, str),
    ...opt('paths', r.paths_json, (v) => fromJson(v) as string[]),
    status: r.status as ApprovalStatus,
    requestedAt: iso(r.requested_at),
    ...opt('expiresAt', r.expires_at, iso),
    ...opt('decidedBy', r.decided_by, str),
    ...opt('decidedAt', r.decided_at, iso),
    ...opt('editedInput', r.edited_input_json, fromJson),
    ...opt('scope', r.scope, (v) => v as 'once' | 'session'),
    ...opt('message', r.message, str),
  };
}

/** The column values of a decision (timestamps aside, which each ledger takes from its own clock). */
export function decisionColumns(d: ApprovalDecisionInput | undefined) {
  return {
    status: d ? d.status : ('pending' as const),
    decidedBy: d?.decidedBy ?? null,
    editedInput: d?.editedInput !== undefined ? toJson(d.editedInput) : null,
    scope: d?.scope ?? null,
    message: d?.message ?? null,
  };
}

/** The column values of a new request (its run resolved by the ledger), already decided when it carries a decision. */
export function approvalColumns(request: NewApproval, runId: string) {
  return {
    workflowId: request.workflowId,
    runId,
    requestId: request.requestId,
    turn: request.turn,
    tool: request.tool,
    kind: request.kind,
    title: request.title,
    input: toJson(request.input),
    command: request.command ?? null,
    paths: request.paths ? toJson(request.paths) : null,
    expiresAt: request.expiresAt ?? null,
    ...decisionColumns(request.decision),
  };
}

/** An accepted operator decision from its row (SQLite or PostgreSQL). */
export function operatorDecisionFromRow(r: Row): DecisionView {
  const claim = r.claim_json ?? r.claim;
  return {
    nonce: String(r.nonce),
    workflowId: String(r.workflow_id),
    runId: String(r.run_id),
    action: String(r.action),
    ...(r.request_id != null ? { requestId: String(r.request_id) } : {}),
    principal: String(r.principal),
    ...(r.key_id != null ? { keyId: String(r.key_id) } : {}),
    authenticated: r.authenticated === 1 || r.authenticated === true,
    ...(claim != null ? { claim: typeof claim === 'string' ? (JSON.parse(claim) as unknown) : claim } : {}),
    at: r.at instanceof Date ? r.at.toISOString() : String(r.at),
  };
}

/** Each prompt run with the model its attempt's last metered call was served by (the gateway's rows, by attempt id). */
export function withServedModels(runs: readonly PromptRunRecord[], calls: readonly { readonly attemptId?: string; readonly call: { readonly model?: string } }[]): PromptRunRecord[] {
  const served = new Map<string, string>();
  for (const c of calls) if (c.attemptId !== undefined && c.call.model !== undefined) served.set(c.attemptId, c.call.model);
  return runs.map((r) => {
    const model = served.get(r.attemptId);
    return model === undefined ? r : { ...r, servedModel: model };
  });
}
