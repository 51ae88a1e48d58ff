/**
 * `durable-harness network RUN`: what a run's sandbox asked of the network, from the ledger's rows of its egress
 * gateway (one per request, refused ones included), and the `network:` line `status` shows. Reads only the ledger, so
 * it needs no Temporal server and works after the run has ended. Every field from the sandbox (a destination, a path)
 * is escaped: the sandbox chose those bytes.
 */
import type { Ledger, LoopbackEntry, NetworkEntry, NetworkSummary } from '../ledger/types.js';
import { totalTokens } from '../contracts/usage.js';
import { escapeControl } from './escape.js';

export interface NetworkPage {
  readonly workflowId: string;
  /** The run the rows belong to (the latest of the workflow id). */
  readonly runId: string;
  readonly requests: readonly NetworkEntry[];
  /** Over every row of the run, whatever the page. */
  readonly summary: NetworkSummary;
  /** The `--after` of the next page, when more rows follow this one. */
  readonly nextAfter?: number;
}

/** A page of the run's requests and its summary; `limit` rows at most (1 to 1000). */
export async function networkPage(
  ledger: Ledger,
  workflowId: string,
  options: { readonly afterSeq: number; readonly limit: number; readonly refusedOnly: boolean },
): Promise<NetworkPage> {
  const run = await ledger.getRun(workflowId);
  // One row more than asked says whether another page follows (the ledger's page stops at 1000).
  const asked = Math.min(options.limit + 1, 1000);
  const rows = await ledger.listNetwork(workflowId, { afterSeq: options.afterSeq, limit: asked, refusedOnly: options.refusedOnly });
  const page = rows.slice(0, options.limit);
  const more = rows.length > options.limit || (rows.length === 1000 && options.limit === 1000);
  const summary = await ledger.networkSummary(workflowId);
  return {
    workflowId,
    runId: run?.runId ?? page[0]?.runId ?? '',
    requests: page,
    summary,
    ...(more && page.length > 0 ? { nextAfter: page.at(-1)!.seq } : {}),
  };
}

const n = (v: number) => v.toLocaleString('en-US');

/** `2026-12-02T19:06:41Z`: a record's epoch ms, to the second. */
function time(at: number): string {
  return Number.isFinite(at) ? new Date(at).toISOString().replace(/\.\d+Z$/, 'Z') : String(at);
}

/** A header and one aligned line per request; the refused ones say how many more the gateway left unrecorded. */
export function formatNetworkTable(rows: readonly NetworkEntry[]): string[] {
  const header = ['SEQ', 'TIME', 'TURN', 'KIND', 'METHOD', 'DESTINATION', 'PATH', 'STATUS', 'BYTES IN/OUT', 'DECISION', 'RULE'];
  const cells = rows.map(({ seq, turn, record: r }) =>
    [
      String(seq),
      time(r.at),
      String(turn),
      r.kind,
      r.method,
      r.destination,
      r.path,
      r.status === 0 ? '-' : String(r.status),
      `${n(r.bytesIn)}/${n(r.bytesOut)}`,
      r.suppressed ? `${r.decision} (+${n(r.suppressed)} not shown)` : r.decision,
      r.rule,
    ].map(escapeControl),
  );
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const right = new Set([0, 2, 7, 8]);
  const line = (c: string[]) =>
    c
      .map((v, i) => (right.has(i) ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...cells.map(line)];
}

/**
 * `12 requests, 2 refused (last: CONNECT evil.example:443 refused:not-allowlisted) · 3 model calls metered, 1,234
 * tokens, served claude-sonnet-4-5`: the footer of `network` and the `network:` line of `status`.
 */
export function networkSummaryText(s: NetworkSummary): string {
  const last = s.lastRefused ? ` (last: ${escapeControl(`${s.lastRefused.method} ${s.lastRefused.destination} ${s.lastRefused.rule}`)})` : '';
  const suppressed = s.suppressed ? `, ${n(s.suppressed)} more refused unrecorded` : '';
  const requests = `${n(s.requests)} request${s.requests === 1 ? '' : 's'}, ${n(s.refused)} refused${last}${suppressed}`;
  const served = s.models.length ? `, served ${s.models.map(escapeControl).join(', ')}` : '';
  const calls = `${n(s.modelCalls)} model call${s.modelCalls === 1 ? '' : 's'} metered, ${n(totalTokens(s.usage))} tokens${served}`;
  return `${requests} · ${calls}`;
}

/** Whether the run has any gateway row (a run without one shows no `network:` line). */
export function hasNetworkRows(s: NetworkSummary): boolean {
  return s.requests > 0 || s.modelCalls > 0 || s.suppressed > 0;
}

/** What `network RUN` prints: the table, a line when more rows follow, and the run's summary. */
export function networkLines(page: NetworkPage, nextCommand: (after: number) => string, refusedOnly: boolean): string[] {
  const lines: string[] = [];
  if (page.requests.length === 0) {
    const what = refusedOnly ? 'no refused request' : 'no request';
    lines.push(hasNetworkRows(page.summary) ? `${what} on this page` : `run ${escapeControl(page.workflowId)} has ${what} through an egress gateway recorded in this ledger`);
  } else lines.push(...formatNetworkTable(page.requests));
  if (page.nextAfter !== undefined) lines.push(`more: ${nextCommand(page.nextAfter)}`);
  lines.push(`total: ${networkSummaryText(page.summary)}`);
  return lines;
}

/** What a run read through its MCP loopback, per turn (`status`'s `loopback:` line). */
export interface LoopbackSummary {
  readonly reads: number;
  readonly refused: number;
  /** Reads per turn, in turn order. */
  readonly byTurn: readonly { readonly turn: number; readonly reads: number }[];
}

/** The run's loopback reads folded per turn (its first 1,000 rows: a summary, not the audit). */
export async function loopbackSummary(ledger: Ledger, workflowId: string): Promise<LoopbackSummary | undefined> {
  const rows = await ledger.listLoopbackReads(workflowId, { limit: 1000 });
  if (rows.length === 0) return undefined;
  const byTurn = new Map<number, number>();
  let refused = 0;
  for (const { turn, read } of rows) {
    byTurn.set(turn, (byTurn.get(turn) ?? 0) + 1);
    if (read.status !== 'ok') refused += 1 + (read.suppressed ?? 0);
  }
  return { reads: rows.length, refused, byTurn: [...byTurn].sort(([a], [b]) => a - b).map(([turn, reads]) => ({ turn, reads })) };
}

/** `5 reads (turn 1: 3, turn 2: 2), 1 refused`. */
export function loopbackSummaryText(s: LoopbackSummary): string {
  const turns = s.byTurn.map((t) => `turn ${t.turn}: ${n(t.reads)}`).join(', ');
  return `${n(s.reads)} read${s.reads === 1 ? '' : 's'} (${turns})${s.refused ? `, ${n(s.refused)} refused` : ''} · \`network RUN --loopback\` lists them`;
}

/** A header and one aligned line per loopback read; every field the harness chose is escaped. */
export function formatLoopbackTable(rows: readonly LoopbackEntry[]): string[] {
  const header = ['SEQ', 'TIME', 'TURN', 'METHOD', 'TARGET', 'STATUS', 'BYTES', 'MS', 'REASON'];
  const cells = rows.map(({ seq, turn, read: r }) =>
    [String(seq), time(r.at), String(turn), r.method, r.target, r.suppressed ? `${r.status} (+${n(r.suppressed)} not shown)` : r.status, n(r.bytes), String(r.durationMs), r.reason ?? ''].map(escapeControl),
  );
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const right = new Set([0, 2, 6, 7]);
  const line = (c: string[]) =>
    c
      .map((v, i) => (right.has(i) ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...cells.map(line)];
}
