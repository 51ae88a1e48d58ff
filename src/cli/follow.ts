/** Follows a run until it ends: one progress line per change, from the status query and the ledger's events. */
import type { AgentRunHandle } from '../client/index.js';
import type { Ledger } from '../ledger/types.js';
import type { AgentRunResult, RunStatusView } from '../workflows/types.js';
import { totalTokens } from '../workflows/usage.js';
import { escapeField, escapeText } from './escape.js';

export interface FollowOptions {
  readonly ledger?: Ledger;
  readonly intervalMs?: number;
  readonly write: (line: string) => void;
}

/** One line: iteration, tokens, cost, state and what the harness is doing (harness text escaped). */
export function progressLine(status: RunStatusView, doing?: string): string {
  const tokens = status.totalTokens.toLocaleString('en-US');
  const cost = status.costBlind ? 'cost unknown' : `$${status.costUsd.toFixed(4)}`;
  const what = doing && status.state === 'running' ? ` · ${escapeField(doing)}` : '';
  return `turn ${status.iteration} · ${tokens} tok · ${cost} · ${escapeField(status.state)}: ${escapeField(status.detail)}${what}`;
}

export async function followRun(run: AgentRunHandle, options: FollowOptions): Promise<AgentRunResult> {
  let done = false;
  const result = run.result().finally(() => {
    done = true;
  });
  let last = '';
  let cursor = 0;
  let doing: string | undefined;
  while (!done) {
    try {
      if (options.ledger) {
        for (const event of await options.ledger.readEvents(run.workflowId, cursor, 200)) {
          cursor = event.cursor;
          if (event.type === 'activity') doing = String((event.data as { description?: unknown }).description ?? '');
        }
      }
      const line = progressLine(await run.status(), doing);
      if (line !== last) {
        options.write(line);
        last = line;
      }
    } catch {
      // The run may not have started its first workflow task yet; try again shortly.
    }
    await Promise.race([result.then(() => undefined, () => undefined), new Promise((r) => setTimeout(r, options.intervalMs ?? 300))]);
  }
  return result;
}

/** Human summary of a finished run. */
export function describeResult(result: AgentRunResult): string {
  const head = `${result.status} after ${result.iterations} turn(s) · ${totalTokens(result.usage).toLocaleString('en-US')} tokens · $${result.costUsd.toFixed(4)}`;
  if (result.status === 'succeeded') return `${head}\n${escapeText(result.result)}`;
  const why = [result.failureType, result.guardrail && `guardrail ${result.guardrail}`].filter(Boolean).map(escapeField).join(', ');
  return `${head}\n${why ? `(${why}) ` : ''}${escapeText(result.reason)}`;
}
