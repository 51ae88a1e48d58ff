/**
 * Row ↔ record mapping of the gateway's tables (`network_requests`, `metered_calls`; schema.ts `gatewayTables`),
 * shared by the SQLite and PostgreSQL ledgers so a record reads back the same from both, and the summary is folded
 * the same way from either database's aggregates.
 */
import type { LoopbackRead } from '../contracts/loopback.js';
import type { ModelCall, NetworkRecord, VendorApi } from '../contracts/network.js';
import { callUsage, pageSize, type Row } from './rows.js';
import type { LoopbackEntry, LoopbackRow, ModelCallEntry, ModelCallRow, NetworkEntry, NetworkRow, NetworkSummary } from './types.js';

/** Default page of `listNetwork` (its maximum is `pageSize`'s, 1000). */
export const DEFAULT_NETWORK_PAGE = 100;

/** A `listNetwork` page size: 1 to 1000, default 100. */
export function networkPage(limit: number = DEFAULT_NETWORK_PAGE): number {
  return pageSize(limit);
}

/** Counts are whole: a fractional duration from a timer is rounded, never refused. */
const whole = (v: number): number => Math.max(0, Math.round(v));

/** The columns every gateway and loopback row is keyed by (its run resolved by the ledger). */
function keyColumns(row: { id: string; workflowId: string; runId?: string; turn: number; attemptId?: string }) {
  return { id: row.id, workflowId: row.workflowId, runId: row.runId ?? null, turn: row.turn, attemptId: row.attemptId ?? null };
}

/** The column values of a request row (its run resolved by the ledger). */
export function networkColumns(row: NetworkRow) {
  const r = row.record;
  return {
    ...keyColumns(row),
    at: whole(r.at),
    kind: r.kind,
    method: r.method,
    destination: r.destination,
    path: r.path,
    status: r.status,
    bytesIn: whole(r.bytesIn),
    bytesOut: whole(r.bytesOut),
    decision: r.decision,
    rule: r.rule,
    durationMs: whole(r.durationMs),
    suppressed: whole(r.suppressed ?? 0),
  };
}

/** The column values of a metered call (unknown counts NULL, never 0). */
export function modelCallColumns(row: ModelCallRow) {
  const c = row.call;
  const u = c.usage;
  return {
    ...keyColumns(row),
    at: whole(c.at),
    api: c.api,
    model: c.model ?? null,
    input: u.input ?? null,
    output: u.output ?? null,
    cacheRead: u.cacheRead ?? null,
    cacheWrite: u.cacheWrite ?? null,
    reasoning: u.reasoning ?? null,
    status: c.status,
    streamed: c.streamed,
    durationMs: whole(c.durationMs),
    firstByteMs: c.firstByteMs === undefined ? null : whole(c.firstByteMs),
  };
}

const num = (v: unknown): number => Number(v);
const present = (v: unknown): boolean => v !== null && v !== undefined;

/** A stored row's keys and its place in arrival order. */
function keysFromRow(r: Row) {
  return {
    seq: num(r.seq),
    id: String(r.id),
    workflowId: String(r.workflow_id),
    runId: String(r.run_id),
    turn: num(r.turn),
    ...(present(r.attempt_id) ? { attemptId: String(r.attempt_id) } : {}),
  };
}

export function networkFromRow(r: Row): NetworkEntry {
  const suppressed = num(r.suppressed);
  const record: NetworkRecord = {
    at: num(r.at_ms),
    kind: r.kind as NetworkRecord['kind'],
    method: String(r.method),
    destination: String(r.destination),
    path: String(r.path),
    status: num(r.status),
    bytesIn: num(r.bytes_in),
    bytesOut: num(r.bytes_out),
    decision: r.decision as NetworkRecord['decision'],
    rule: String(r.rule),
    durationMs: num(r.duration_ms),
    ...(suppressed > 0 ? { suppressed } : {}),
  };
  return {
    ...keysFromRow(r),
    record,
  };
}

export function modelCallFromRow(r: Row): ModelCallEntry {
  const call: ModelCall = {
    at: num(r.at_ms),
    api: r.api as VendorApi,
    ...(present(r.model) ? { model: String(r.model) } : {}),
    usage: callUsage(r),
    status: num(r.status),
    streamed: r.streamed === true || r.streamed === 1,
    durationMs: num(r.duration_ms),
    ...(present(r.first_byte_ms) ? { firstByteMs: num(r.first_byte_ms) } : {}),
  };
  return {
    ...keysFromRow(r),
    call,
  };
}

/**
 * The aggregate queries both ledgers run for a summary, each over one run's rows through its index. SQL's SUM skips
 * NULLs and is NULL when every row is: exactly `addUsage`'s rule (a field is unknown only when no call knew it).
 */
export const SUMMARY_SQL = {
  requests: `SELECT count(*) AS requests,
      COALESCE(SUM(CASE WHEN decision = 'refused' THEN 1 ELSE 0 END), 0) AS refused,
      COALESCE(SUM(suppressed), 0) AS suppressed
    FROM network_requests WHERE workflow_id = $w AND run_id = $r`,
  lastRefused: `SELECT method, destination, rule, at_ms FROM network_requests
    WHERE workflow_id = $w AND run_id = $r AND decision = 'refused' ORDER BY seq DESC LIMIT 1`,
  calls: `SELECT count(*) AS calls, SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,
      SUM(cache_read_tokens) AS cache_read_tokens, SUM(cache_write_tokens) AS cache_write_tokens, SUM(reasoning_tokens) AS reasoning_tokens
    FROM metered_calls WHERE workflow_id = $w AND run_id = $r`,
  models: `SELECT DISTINCT model FROM metered_calls WHERE workflow_id = $w AND run_id = $r AND model IS NOT NULL ORDER BY model`,
} as const;

/** The summary from the four aggregate rows (`SUMMARY_SQL`), as either driver returns them. */
export function summaryFromRows(requests: Row, lastRefused: Row | undefined, calls: Row, models: readonly Row[]): NetworkSummary {
  return {
    requests: num(requests.requests),
    refused: num(requests.refused),
    suppressed: num(requests.suppressed),
    modelCalls: num(calls.calls),
    usage: callUsage(calls),
    models: models.map((m) => String(m.model)),
    ...(lastRefused
      ? { lastRefused: { method: String(lastRefused.method), destination: String(lastRefused.destination), rule: String(lastRefused.rule), at: num(lastRefused.at_ms) } }
      : {}),
  };
}

/** The column values of a loopback read (its run resolved by the ledger). */
export function loopbackColumns(row: LoopbackRow) {
  const r = row.read;
  return {
    ...keyColumns(row),
    at: whole(r.at),
    method: r.method,
    target: r.target,
    status: r.status,
    bytes: whole(r.bytes),
    durationMs: whole(r.durationMs),
    reason: r.reason ?? null,
    suppressed: whole(r.suppressed ?? 0),
  };
}

export function loopbackFromRow(r: Row): LoopbackEntry {
  const suppressed = num(r.suppressed);
  const read: LoopbackRead = {
    at: num(r.at_ms),
    method: String(r.method),
    target: String(r.target),
    status: r.status as LoopbackRead['status'],
    bytes: num(r.bytes),
    durationMs: num(r.duration_ms),
    ...(present(r.reason) ? { reason: String(r.reason) } : {}),
    ...(suppressed > 0 ? { suppressed } : {}),
  };
  return {
    ...keysFromRow(r),
    read,
  };
}
