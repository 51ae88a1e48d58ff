/**
 * The turn's progress notes to its own run (`turnProgress`, src/workflows/progress.ts), so the Temporal UI's current
 * details show the turn in flight: at most one per interval, only when what it reports changed, never more than one
 * on its way. Each note costs the run's history a signal event and a workflow task (4 events), so a turn that keeps
 * changing costs 4 events per interval — 24 a minute at the default 10 s — and a quiet or short turn costs none.
 * Best effort: a note that cannot be sent is dropped (the heartbeat has the same facts).
 */
import type { Client } from '@temporalio/client';
import { PROGRESS_ACTIVITY_CHARS, type TurnProgressNote } from '../../workflows/progress.js';
import { turnProgressSignal } from '../../workflows/messages.js';
import type { TurnProgress } from './attempt.js';

export interface ProgressSignalOptions {
  readonly client: Client | undefined;
  readonly run: { readonly workflowId: string; readonly runId: string };
  readonly intervalMs: number;
  readonly log: { warn(message: string, meta?: Record<string, unknown>): void };
}

/** Starts the notes of one attempt; the returned function stops them (the attempt's end). */
export function startProgressSignals(progress: TurnProgress, options: ProgressSignalOptions): () => void {
  const { client, run, intervalMs, log } = options;
  if (!client) return () => undefined;
  const handle = client.workflow.getHandle(run.workflowId, run.runId);
  let last = '';
  let sending = false;
  let warned = false;
  const tick = () => {
    if (sending) return;
    const note: TurnProgressNote = {
      turn: progress.turn,
      attempt: progress.attempt,
      activity: progress.lastEvent.slice(0, PROGRESS_ACTIVITY_CHARS),
      tokens: progress.tokens,
      costUsd: progress.costUsd,
    };
    const key = JSON.stringify(note);
    if (key === last) return;
    sending = true;
    client
      .withDeadline(Date.now() + Math.min(5000, intervalMs), () => handle.signal(turnProgressSignal, note))
      .then(() => {
        last = key;
      })
      .catch((err: unknown) => {
        if (!warned) log.warn(`could not tell run ${run.workflowId} about its turn's progress (current details lag)`, { error: String(err) });
        warned = true;
      })
      .finally(() => {
        sending = false;
      });
  };
  const timer = setInterval(tick, intervalMs);
  return () => clearInterval(timer);
}
