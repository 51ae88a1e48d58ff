/**
 * Row ↔ record mapping shared by the SQLite and PostgreSQL ledgers. Both schemas use the same table and column
 * names; only the drivers' value types differ (SQLite: 0/1 and ISO text; node-postgres: booleans, Date for
 * TIMESTAMPTZ and strings for BIGINT), so the helpers below accept either and a record reads the same from both.
 */
import type {
  ApprovalDecisionInput,
  ApprovalRecord,
  ApprovalStatus,
  LedgerEvent,
  NewApproval,
  PromptRunRecord,
  RunRecord,
  RunStatus,
  RunStepRecord,
} from './types.js';

/** A row as either driver returns it. */
export type Row = Record<string, unknown>;

export type RunView = RunRecord & { status: RunStatus; result: unknown; externalSessionId?: string };

export function toJson(value: unknown): string {
  return JSON.stringify(value ?? null);
}

export function fromJson(text: unknown): unknown {
  return text === null || text === undefined ? null : (JSON.parse(text as string) as unknown);
}

const str = (v: unknown): string => v as string;
/** BIGINT arrives as a string from node-postgres. */
const num = (v: unknown): number => Number(v);
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
  };
}

export function promptRunFromRow(r: Row): PromptRunRecord {
  return {
    workflowId: str(r.workflow_id),
    turn: num(r.turn),
    promptId: str(r.prompt_id),
    modelId: str(r.model_id),
    vendorId: str(r.vendor_id),
    ...opt('reportedModel', r.reported_model, str),
    usage: {
      input: num(r.input_tokens),
      output: num(r.output_tokens),
      cacheRead: num(r.cache_read_tokens),
      cacheWrite: num(r.cache_write_tokens),
    },
    costUsd: num(r.cost_usd),
    costSource: r.cost_source as PromptRunRecord['costSource'],
    ...opt('externalSessionId', r.external_session_id, str),
    resumed: bool(r.resumed),
    durationMs: num(r.duration_ms),
    input: str(r.input),
    output: str(r.output),
  };
}

export function stepFromRow(r: Row): RunStepRecord {
  return { workflowId: str(r.workflow_id), seq: num(r.seq), turn: num(r.turn), type: str(r.type), payload: fromJson(r.payload_json) };
}

export function eventFromRow(r: Row): LedgerEvent {
  return { cursor: num(r.cursor), workflowId: str(r.workflow_id), turn: num(r.turn), type: str(r.type), data: fromJson(r.data_json), at: iso(r.at) };
}

export function approvalFromRow(r: Row): ApprovalRecord {
  return {
    workflowId: str(r.workflow_id),
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

/** The column values of a new request, already decided when it carries a decision. */
export function approvalColumns(request: NewApproval) {
  return {
    workflowId: request.workflowId,
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
