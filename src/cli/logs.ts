/**
 * `durable-harness logs RUN [--follow] [--json] [--since CURSOR]`: a run's events, one line each, from the ledger
 * this machine reaches (DATABASE_URL: PostgreSQL, woken by its notifications; else the SQLite file under --data,
 * read every 100 ms), or — with `--follow` and no ledger — sampled from Temporal. Run-supplied text is escaped and
 * every line bounded.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { getAgentRun, postgresEventSource, type RunEvent, type RunEventSource } from '../client/index.js';
import type { Client } from '@temporalio/client';
import { formatUsd } from './follow.js';
import { SqliteLedger, postgresUrlOf, redactDatabaseUrl } from '../ledger/index.js';
import { ledgerEventSource } from '../ledger/events.js';
import type { RunOutcome } from '../contracts/run.js';
import { escapeControl } from './escape.js';
import { CliError, ExitCodes, exitCodeForResult, type ExitCode } from './exit-codes.js';
import { err, out } from './io.js';
import type { Settings } from './settings.js';

/** A human line is cut here (after escaping): a 1 MB harness line prints as one bounded line. */
export const maxLogLineChars = 2000;

export interface LogsOptions {
  readonly follow: boolean;
  readonly json: boolean;
  readonly since?: string;
}

/** The event source of the ledger this machine reaches, or undefined when it reaches none. */
export async function openEventSource(s: Pick<Settings, 'dataDir'>, env: Readonly<Record<string, string | undefined>> = process.env): Promise<RunEventSource | undefined> {
  const url = postgresUrlOf(env);
  if (url) {
    try {
      return await postgresEventSource(url);
    } catch (e) {
      throw new CliError(`cannot read run events from PostgreSQL at ${redactDatabaseUrl(url)}: ${(e as Error).message}. Check DATABASE_URL`, ExitCodes.usage);
    }
  }
  const file = path.join(s.dataDir, 'ledger.sqlite');
  if (!existsSync(file)) return undefined;
  const ledger = SqliteLedger.open(file);
  return ledgerEventSource(ledger, { close: () => ledger.close() });
}

/** The exit code of a run's end as `status` gives it (an end Temporal reports in other words counts as failed). */
export function exitCodeForEnd(end: Extract<RunEvent, { type: 'end' }>): ExitCode {
  const outcomes: readonly string[] = ['succeeded', 'failed', 'stopped', 'cancelled'] satisfies RunOutcome[];
  return outcomes.includes(end.status) ? exitCodeForResult({ status: end.status as RunOutcome, ...(end.failureType ? { failureType: end.failureType } : {}) }) : ExitCodes.failed;
}

const tokens = (n: number | undefined) => (n === undefined ? '?' : n.toLocaleString('en-US'));

/** What the event says, for a person (unescaped: `logLine` escapes it). */
function describe(e: RunEvent): string {
  switch (e.type) {
    case 'activity':
      return e.tool ? `tool ${e.tool.name} (${e.tool.kind})${e.tool.target !== undefined ? `: ${e.tool.target}` : ''}` : e.description;
    case 'usage': {
      const u = e.usage;
      const cache = u.cacheRead || u.cacheWrite ? ` · cache ${tokens(u.cacheRead)} read, ${tokens(u.cacheWrite)} written` : '';
      return `usage ${tokens(u.input)} in · ${tokens(u.output)} out${cache}${e.costUsd !== undefined ? ` · ${formatUsd(e.costUsd)} (harness)` : ''}`;
    }
    case 'totals':
      return `so far ${tokens(e.tokens)} tok · ${formatUsd(e.costUsd)}`;
    case 'approval-requested':
      return `asks permission (${e.tool.kind}) ${e.tool.name}: ${e.title}`;
    case 'approval-decided':
      return `permission ${e.decision} for ${e.tool} by ${e.decidedBy}${e.message ? `: ${e.message}` : ''}`;
    case 'session':
      return `session ${e.sessionId}${e.resumed ? ' (resumed)' : ''}${e.model ? ` · model ${e.model}` : ''}`;
    case 'turn-end':
      return e.ok ? `turn complete: ${e.text ?? ''}` : `turn failed (${e.code ?? 'error'}): ${e.message ?? ''}`;
    case 'step':
      return `step ${e.seq}: ${e.step}`;
    case 'action':
      return `action ${e.seq} ${e.action}: ${e.ok ? 'ok' : `failed: ${e.error ?? ''}`}`;
    case 'retry':
      return `retry: attempt ${e.attempt}`;
    case 'end':
      return `run ${e.status}${e.failureType ? ` (${e.failureType})` : ''}${e.reason ? `: ${e.reason}` : ''}${e.source === 'temporal' ? ' [from Temporal]' : ''}`;
    case 'note':
      return `${e.name} ${e.text}`;
  }
}

/** `12:03:04.120  #1042  turn 3  tool Bash (command): ls -la` — escaped and at most `maxLogLineChars`. */
export function logLine(e: RunEvent): string {
  const time = e.at.slice(11, 23);
  const line = `${time}  #${e.cursor}  turn ${e.turn}  ${escapeControl(describe(e))}`;
  return line.length > maxLogLineChars ? `${line.slice(0, maxLogLineChars)}… (${line.length} characters)` : line;
}

export async function logsCommand(client: Client, s: Settings, id: string, options: LogsOptions): Promise<ExitCode> {
  const run = getAgentRun(client, id);
  // An unknown id is refused here (the caller maps WorkflowNotFoundError), before any ledger is opened.
  await run.handle.describe();
  const source = await openEventSource(s);
  if (!source && !options.follow) {
    throw new CliError(
      `no ledger here to read run ${id}'s events from (no DATABASE_URL, no ${path.join(s.dataDir, 'ledger.sqlite')}). Point --data or DATABASE_URL at the workers' ledger, or follow it live from Temporal with --follow (coarser: no resume)`,
      ExitCodes.usage,
    );
  }
  const stop = new AbortController();
  const interrupt = () => stop.abort();
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  let last: string | undefined;
  let end: Extract<RunEvent, { type: 'end' }> | undefined;
  try {
    for await (const event of run.events({ ...(source ? { source } : {}), ...(options.since !== undefined ? { since: options.since } : {}), follow: options.follow, signal: stop.signal })) {
      out(options.json ? JSON.stringify(event) : logLine(event));
      last = event.cursor;
      if (event.type === 'end') end = event;
    }
  } finally {
    process.off('SIGINT', interrupt);
    process.off('SIGTERM', interrupt);
    await source?.close?.();
  }
  if (stop.signal.aborted && !end) {
    const resume = last !== undefined && source ? `; resume with --since ${last}` : '';
    err(`stopped following ${id}; the run goes on${resume}`);
    return ExitCodes.interrupted;
  }
  return end ? exitCodeForEnd(end) : ExitCodes.succeeded;
}
