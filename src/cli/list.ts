/** `durable-harness list`: runs from Temporal's visibility store, filtered by search attributes, as a table or JSON. */
import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { roundUsd } from '../contracts/money.js';
import { agentAttribute, costAttribute, harnessAttribute, statusAttribute, tenantAttribute } from '../workflows/search-attributes.js';
import type { RunPhase } from '../workflows/types.js';
import { escapeControl } from './escape.js';
import { formatUsd } from './follow.js';
import { CliError, ExitCodes } from './exit-codes.js';

/**
 * Runs that closed without writing a final status of their own (the search attributes of a closed workflow cannot
 * change): found by Temporal's execution status instead.
 */
const closedByTemporal = { terminated: 'Terminated', timed_out: 'TimedOut' } as const;
export type ListStatus = RunPhase | keyof typeof closedByTemporal;

/** What `--status` accepts: the run states (DurableHarnessStatus), and how Temporal closed a run it ended itself. */
export const listStatuses: readonly ListStatus[] = ['starting', 'running', 'awaiting_operator', 'waiting_for_reply', 'ending', 'succeeded', 'failed', 'stopped', 'cancelled', 'terminated', 'timed_out'];

const finalStates: ReadonlySet<string> = new Set(['succeeded', 'failed', 'stopped', 'cancelled']);

export interface ListFilters {
  readonly limit: number;
  readonly status?: ListStatus;
  readonly agent?: string;
  readonly tenant?: string;
}

export interface RunRow {
  readonly workflowId: string;
  /** The run's own status; Temporal's (lowercased) when the run closed without setting a final one (e.g. terminated). */
  readonly status: string;
  readonly temporalStatus: string;
  readonly agent?: string;
  readonly harness?: string;
  readonly tenant?: string;
  readonly costUsd?: number;
  readonly started: string;
  readonly closed?: string;
}

/** A visibility-query string literal; values with quotes or backslashes are refused rather than guessed at. */
function literal(flag: string, value: string): string {
  if (/['"\\]/.test(value)) throw new CliError(`--${flag} cannot contain quotes or backslashes`, ExitCodes.usage);
  return `'${value}'`;
}

export function listQuery(filters: Omit<ListFilters, 'limit'>): string {
  const clauses = [`WorkflowType = 'agentRun'`];
  if (filters.status && filters.status in closedByTemporal) {
    clauses.push(`ExecutionStatus = '${closedByTemporal[filters.status as keyof typeof closedByTemporal]}'`);
  } else if (filters.status) {
    clauses.push(`${statusAttribute.name} = ${literal('status', filters.status)}`);
    // An open state is only true of an open run: a terminated run keeps the state it was in.
    if (!finalStates.has(filters.status)) clauses.push(`ExecutionStatus = 'Running'`);
  }
  if (filters.agent) clauses.push(`${agentAttribute.name} = ${literal('agent', filters.agent)}`);
  if (filters.tenant) clauses.push(`${tenantAttribute.name} = ${literal('tenant', filters.tenant)}`);
  return clauses.join(' AND ');
}

export function rowOf(wf: WorkflowExecutionInfo): RunRow {
  const attrs = wf.typedSearchAttributes;
  const own = attrs.get(statusAttribute);
  const temporalStatus = wf.status.name;
  // A closed run whose own status is not final ended outside the workflow's hands (terminated, timed out).
  const status = temporalStatus !== 'RUNNING' && (!own || !finalStates.has(own)) ? temporalStatus.toLowerCase() : (own ?? 'starting');
  const cost = attrs.get(costAttribute);
  return {
    workflowId: wf.workflowId,
    status,
    temporalStatus,
    agent: attrs.get(agentAttribute),
    harness: attrs.get(harnessAttribute),
    tenant: attrs.get(tenantAttribute),
    costUsd: cost === undefined ? undefined : roundUsd(cost),
    started: wf.startTime.toISOString(),
    ...(wf.closeTime ? { closed: wf.closeTime.toISOString() } : {}),
  };
}

/** A header and one aligned line per run; every field escaped, cost as dollars. */
export function formatTable(rows: readonly RunRow[]): string[] {
  const header = ['RUN ID', 'STATUS', 'AGENT', 'HARNESS', 'TENANT', 'COST', 'STARTED'];
  const cells = rows.map((r) => [r.workflowId, r.status, r.agent ?? '', r.harness ?? '', r.tenant ?? '', formatUsd(r.costUsd), r.started.replace(/\.\d+Z$/, 'Z')].map(escapeControl));
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) =>
    c
      .map((v, i) => (i === 5 ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...cells.map(line)];
}

export async function listRuns(client: Client, filters: ListFilters): Promise<RunRow[]> {
  const rows: RunRow[] = [];
  for await (const wf of client.workflow.list({ query: listQuery(filters) })) {
    rows.push(rowOf(wf));
    if (rows.length >= filters.limit) break;
  }
  return rows;
}
