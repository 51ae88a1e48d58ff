/**
 * `durable-harness approvals [RUN]`, `approve RUN REQUEST [--edit JSON] [--scope session]`, `deny RUN REQUEST
 * [--reason TEXT]`, and the permission lines of `status`: pending permission requests as the runs report them
 * (status query), found across runs by the DurableHarnessPendingApprovals search attribute.
 */
import type { Client } from '@temporalio/client';
import { getAgentRun } from '../client/index.js';
import type { PendingApprovalView } from '../workflows/approvals.js';
import { pendingApprovalsAttribute } from '../workflows/search-attributes.js';
import type { RunStatusView } from '../workflows/types.js';
import { escapeControl, escapeText } from './escape.js';
import { CliError, ExitCodes } from './exit-codes.js';

/** One pending request of one run. */
export interface ApprovalRow extends PendingApprovalView {
  readonly workflowId: string;
}

/** Open runs with at least one pending request (visibility is eventually consistent: a second or so behind). */
export const pendingRunsQuery = `WorkflowType = 'agentRun' AND ExecutionStatus = 'Running' AND ${pendingApprovalsAttribute.name} > 0`;

/** The pending requests of one run, or of every open run that has some. */
export async function pendingApprovals(client: Client, workflowId: string | undefined, limit = 100): Promise<{ rows: ApprovalRow[]; unanswered: string[] }> {
  const ids: string[] = [];
  if (workflowId) ids.push(workflowId);
  else {
    for await (const wf of client.workflow.list({ query: pendingRunsQuery })) {
      ids.push(wf.workflowId);
      if (ids.length >= limit) break;
    }
  }
  const rows: ApprovalRow[] = [];
  const unanswered: string[] = [];
  for (const id of ids) {
    let view: RunStatusView;
    try {
      view = await getAgentRun(client, id).status({ timeoutMs: 3000 });
    } catch (e) {
      if (workflowId) throw e;
      unanswered.push(id);
      continue;
    }
    for (const p of view.pendingApprovals ?? []) rows.push({ workflowId: id, ...p });
  }
  return { rows, unanswered };
}

/** How long a request has waited and how long it has left, for people. */
function waited(row: PendingApprovalView, nowMs: number): string {
  const since = Date.parse(row.since);
  const seconds = (ms: number) => (ms >= 120_000 ? `${Math.round(ms / 60_000)} min` : `${Math.max(0, Math.round(ms / 1000))} s`);
  return `${seconds(nowMs - since)} (denied in ${seconds(since + row.timeoutMs - nowMs)})`;
}

/** What a request would do (its content, diff, argv and working directory) as lines under it, indented and escaped. */
export function detailLines(row: PendingApprovalView, indent = '    '): string[] {
  return row.detail === undefined ? [] : escapeText(row.detail.replace(/\n$/, '')).split('\n').map((l) => `${indent}${l}`);
}

/** A header and one line per request, then what each would do; every run-supplied field escaped. */
export function formatApprovals(rows: readonly ApprovalRow[], nowMs = Date.now()): string[] {
  const header = ['RUN ID', 'REQUEST', 'TURN', 'KIND', 'TOOL', 'WAITING', 'TITLE'];
  const cells = rows.map((r) => [r.workflowId, r.requestId, String(r.turn), r.kind, r.tool, waited(r, nowMs), r.title].map(escapeControl));
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) =>
    c
      .map((v, i) => (i === c.length - 1 ? v : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const details = rows.flatMap((r) => (r.detail === undefined ? [] : ['', `${escapeControl(r.requestId)} (${escapeControl(r.workflowId)}) would do:`, ...detailLines(r)]));
  return [line(header), ...cells.map(line), ...details];
}

/** `--edit JSON`: an object whose fields replace the tool input's fields. */
export function parseEdit(text: string | undefined): Record<string, unknown> | undefined {
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new CliError(`--edit must be JSON (e.g. '{"command": "ls -la"}'): ${(e as Error).message}`, ExitCodes.usage);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new CliError(`--edit must be a JSON object whose fields replace the tool input's fields (e.g. '{"command": "ls -la"}'), got ${text}`, ExitCodes.usage);
  }
  return value as Record<string, unknown>;
}

/** `--scope once|session`. */
export function parseScope(text: string | undefined): 'once' | 'session' | undefined {
  if (text === undefined || text === 'once' || text === 'session') return text;
  throw new CliError(`--scope must be "once" or "session", got "${text}"`, ExitCodes.usage);
}

/** The lines `status` adds about permissions: an advisory posture, and each pending request with its commands. */
export function permissionLines(view: RunStatusView, workflowId: string, command: (...args: string[]) => string): string[] {
  const lines: string[] = [];
  if (view.policy && view.policy.decisions !== 'signed' && (view.state === 'running' || view.state === 'awaiting_operator' || view.state === 'waiting_for_reply')) {
    lines.push('decisions: NOT authenticated (trusted-network): whoever reaches Temporal can approve, reply, retry or cancel this run');
  }
  if (view.policy?.network === 'open') lines.push('network: OPEN (unconfined: development only): the sandbox reaches whatever its host reaches, and its vendor key is in its environment');
  const p = view.policy?.permissions;
  if (p && !p.enforced) lines.push(`permissions: ${p.posture} is ADVISORY, not enforced (${escapeControl(p.note ?? 'the harness cannot ask before a tool runs')})`);
  const pending = view.pendingApprovals ?? [];
  if (pending.length > 0) {
    lines.push(`${pending.length} permission request${pending.length === 1 ? '' : 's'} waiting for an operator:`);
    for (const r of pending) {
      lines.push(`  ${escapeControl(r.requestId)}  ${escapeControl(r.kind)} · ${escapeControl(r.tool)}: ${escapeControl(r.title)}  — waiting ${waited(r, Date.now())}`, ...detailLines(r));
    }
    const first = pending[0]!.requestId;
    lines.push(`  approve:  ${command('approve', workflowId, first)}`, `  deny:     ${command('deny', workflowId, first, '--reason', 'why')}`);
  }
  return lines;
}
