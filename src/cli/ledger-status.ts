/**
 * What `status` adds from the books: the run's ledger totals over every attempt (failed ones included), the
 * harness's own cost beside the price table's (a mismatch shown), and whether the ledger can be written — from the
 * ledger itself and from the in-flight turn's heartbeat, which says when a worker is waiting on it.
 */
import { decodeFromPayloadsAtIndex } from '@temporalio/common/lib/internal-non-workflow/index.js';
import type { AgentRunHandle } from '../client/index.js';
import type { Ledger, NetworkSummary, RunTotals } from '../ledger/types.js';
import { totalTokens } from '../contracts/usage.js';
import { hasNetworkRows, loopbackSummary, loopbackSummaryText, networkSummaryText, type LoopbackSummary } from './network.js';

export interface LedgerStatus {
  /** Totals from the ledger, when this command can read it. */
  readonly totals?: RunTotals;
  /** Why the ledger cannot take writes (from this command's view, or a worker's heartbeat); absent when fine. */
  readonly problem?: string;
  /** What the run's egress gateway recorded, when it recorded anything (`durable-harness network RUN` lists it). */
  readonly network?: NetworkSummary;
  /** What the harness read through the run's MCP loopback, when it read anything. */
  readonly loopback?: LoopbackSummary;
}

/** The ledger problem a worker's in-flight turn reports in its heartbeat, if any. */
async function problemFromHeartbeat(run: AgentRunHandle): Promise<string | undefined> {
  try {
    const description = await run.handle.describe();
    for (const activity of description.raw.pendingActivities ?? []) {
      const payloads = activity.heartbeatDetails?.payloads;
      if (!payloads?.length) continue;
      // Through the client's converter: with payload encryption on, heartbeat details are encrypted too.
      const details = await decodeFromPayloadsAtIndex<{ ledger?: unknown } | undefined>(run.handle.client.options.loadedDataConverter, 0, payloads);
      if (typeof details?.ledger === 'string' && details.ledger !== 'ok') return details.ledger;
    }
  } catch {
    // Not started yet, or closed: no heartbeat to read.
  }
  return undefined;
}

export async function ledgerStatus(run: AgentRunHandle, ledger: Ledger | undefined): Promise<LedgerStatus> {
  const fromWorker = await problemFromHeartbeat(run);
  if (!ledger) return fromWorker ? { problem: fromWorker } : {};
  const health = await ledger.health();
  const totals = await ledger.runTotals(run.workflowId).catch(() => undefined);
  const network = await ledger.networkSummary(run.workflowId).catch(() => undefined);
  const loopback = await loopbackSummary(ledger, run.workflowId).catch(() => undefined);
  const problem = health.ok ? fromWorker : health.problem;
  return {
    ...(totals && totals.attempts > 0 ? { totals } : {}),
    ...(network && hasNetworkRows(network) ? { network } : {}),
    ...(loopback ? { loopback } : {}),
    ...(problem ? { problem } : {}),
  };
}

/** `ledger: 5 attempts (2 unused) · 5,030 tok · $0.0036 price table · harness says $0.0050 — MISMATCH`. */
export function ledgerStatusLines(status: LedgerStatus): string[] {
  const lines: string[] = [];
  const t = status.totals;
  if (t) {
    const attempts = `${t.attempts} attempt(s)${t.unusedAttempts ? ` (${t.unusedAttempts} unused, ${totalTokens(t.unusedUsage).toLocaleString('en-US')} tok)` : ''}`;
    const cost = t.costBlind ? `cost unknown (at least $${t.costUsd.toFixed(4)})` : `$${t.costUsd.toFixed(4)} ${t.costSource === 'price-table' ? 'price table' : t.costSource}`;
    const harness = t.harnessCostUsd !== undefined && t.costSource !== 'harness' ? ` · harness says $${t.harnessCostUsd.toFixed(4)}${t.costMismatch ? ' — MISMATCH' : ''}` : '';
    lines.push(`ledger: ${attempts} · ${totalTokens(t.usage).toLocaleString('en-US')} tok · ${cost}${harness}`);
  }
  if (status.network) lines.push(`network: ${networkSummaryText(status.network)}`);
  if (status.loopback) lines.push(`loopback: ${loopbackSummaryText(status.loopback)}`);
  if (status.problem) lines.push(`ledger NOT WRITABLE: ${status.problem}`);
  return lines;
}
