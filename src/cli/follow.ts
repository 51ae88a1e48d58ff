/**
 * Follows a run: one progress report per change (status query + the ledger's activity events), until the run ends,
 * needs a human, or no worker answers.
 */
import { deliverableLine } from '../contracts/repository.js';
import type { AgentRunHandle } from '../client/index.js';
import type { Ledger } from '../ledger/types.js';
import type { AgentRunResult, RunPhase, RunStatusView } from '../workflows/types.js';
import { totalTokens } from '../contracts/usage.js';
import { escapeControl } from './escape.js';
import { waitingApproval } from './exit-codes.js';

/** States in which the run waits for a person: an operator decision or a reply. */
export const humanStates: ReadonlySet<RunPhase> = new Set(['awaiting_operator', 'waiting_for_reply']);

/**
 * What the run waits for from a human, as a key that changes with each new wait (undefined: nothing): its state,
 * or — while it runs — the permission request that waits for an operator.
 */
export function humanWait(status: Pick<RunStatusView, 'state' | 'pendingApprovals'>): string | undefined {
  if (humanStates.has(status.state)) return status.state;
  const request = waitingApproval(status);
  return request && `approval:${request.requestId}`;
}

export type FollowEnd =
  | { readonly kind: 'ended'; readonly result: AgentRunResult }
  | { readonly kind: 'needs-human'; readonly status: RunStatusView }
  | { readonly kind: 'no-worker'; readonly silentForMs: number };

export interface FollowOptions {
  readonly ledger?: Ledger;
  /** How often to sample the status (default 300 ms). */
  readonly intervalMs?: number;
  /** Keep following while the run waits for a human (default: return `needs-human`). */
  readonly wait?: boolean;
  /** Called when the state, counters or what the harness does change. */
  readonly onProgress: (status: RunStatusView, doing: string | undefined) => void;
  /** With `wait`: called once each time the run starts waiting for a human. */
  readonly onNeedsHuman?: (status: RunStatusView) => void;
  /** The status query's own deadline (default 3 s); it needs a worker to answer. */
  readonly queryTimeoutMs?: number;
  /** Give up with `no-worker` when no status answer came for this long while the run is open (default 8 s). */
  readonly noWorkerAfterMs?: number;
}

/**
 * One line: turn, tokens, cost, state and what the harness is doing; while a turn runs, what its heartbeats say
 * (tokens and cost so far in the turn, a retry's attempt). Run-supplied text is escaped.
 */
export function progressLine(status: RunStatusView, doing?: string): string {
  const tokens = status.totalTokens.toLocaleString('en-US');
  const cost = status.costBlind ? 'cost unknown' : formatUsd(status.costUsd);
  const running = status.state === 'running';
  const now = doing ?? (running ? status.inFlight?.lastEvent : undefined);
  const what = now && running ? ` · ${escapeControl(now)}` : '';
  return `turn ${status.iteration} · ${tokens} tok · ${cost} · ${status.state}: ${escapeControl(status.detail)}${what}${running ? inFlightText(status) : ''}`;
}

/** ` · in flight: 1,230 tok, $0.0012, attempt 2`, or nothing before the turn has anything to say. */
function inFlightText(status: RunStatusView): string {
  const f = status.inFlight;
  if (!f) return '';
  const parts = [
    ...(f.tokens > 0 ? [`${f.tokens.toLocaleString('en-US')} tok`] : []),
    ...(f.costUsd !== undefined && f.costUsd > 0 ? [formatUsd(f.costUsd)] : []),
    ...(f.attempt > 1 ? [`attempt ${f.attempt}`] : []),
  ];
  return parts.length ? ` · in flight: ${parts.join(', ')}` : '';
}

/** `$0.0023`: four decimals for people; results and JSON carry micro-dollars. */
export function formatUsd(usd: number | undefined): string {
  return usd === undefined || !Number.isFinite(usd) ? '' : `$${usd.toFixed(4)}`;
}

export async function followRun(run: AgentRunHandle, options: FollowOptions): Promise<FollowEnd> {
  // Set from the result's callbacks (declared this way so the checks below are not narrowed away).
  let ended = undefined as AgentRunResult | undefined;
  let failed = undefined as { error: unknown } | undefined;
  const result = run.result().then(
    (r) => {
      ended = r;
    },
    (error: unknown) => {
      failed = { error };
    },
  );
  const interval = options.intervalMs ?? 300;
  const noWorkerAfterMs = options.noWorkerAfterMs ?? 8000;
  let lastKey = '';
  let cursor = 0;
  let doing: string | undefined;
  let lastAnswer = Date.now();
  let waitingForHuman: string | undefined;
  for (;;) {
    if (ended) return { kind: 'ended', result: ended };
    if (failed) throw failed.error;
    try {
      if (options.ledger) {
        for (const event of await options.ledger.readEvents(run.workflowId, cursor, 200)) {
          cursor = event.cursor;
          if (event.type === 'activity') doing = String((event.data as { description?: unknown }).description ?? '');
        }
      }
      const status = await run.status({ timeoutMs: options.queryTimeoutMs ?? 3000 });
      lastAnswer = Date.now();
      const key = progressLine(status, doing);
      if (key !== lastKey) {
        lastKey = key;
        options.onProgress(status, status.state === 'running' ? doing : undefined);
      }
      const wait = humanWait(status);
      if (wait !== undefined) {
        if (!options.wait) return { kind: 'needs-human', status };
        if (wait !== waitingForHuman) options.onNeedsHuman?.(status);
      }
      waitingForHuman = wait;
    } catch {
      // Before its first workflow task the run cannot answer yet; without a worker it never will.
      const silentForMs = Date.now() - lastAnswer;
      if (silentForMs >= noWorkerAfterMs && !ended && !failed) return { kind: 'no-worker', silentForMs };
    }
    await Promise.race([result, new Promise((r) => setTimeout(r, interval))]);
  }
}

/** Human summary of a finished run; run-supplied text is escaped (its newlines kept as lines). */
export function describeResult(result: AgentRunResult): string {
  const head = `${result.status} after ${result.iterations} turn(s) · ${totalTokens(result.usage).toLocaleString('en-US')} tokens · ${formatUsd(result.costUsd)}`;
  const text = (s: string | undefined) => (s ?? '').split('\n').map(escapeControl).join('\n');
  const delivered = result.deliverable ? `\ndeliverable: ${escapeControl(deliverableLine(result.deliverable))} (durable-harness diff ${escapeControl(result.workflowId)})` : '';
  if (result.status === 'succeeded') return `${head}\n${text(result.result)}${delivered}`;
  const why = [result.failureType, result.guardrail && `guardrail ${result.guardrail}`].filter(Boolean).join(', ');
  return `${head}\n${why ? `(${why}) ` : ''}${text(result.reason)}${delivered}`;
}
