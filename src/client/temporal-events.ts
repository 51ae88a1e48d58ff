/**
 * A run's events without a ledger: sampled from Temporal (the status query and the in-flight turn's heartbeat) every
 * `intervalMs`. Coarser than the ledger's: one `activity` per change of what the heartbeat last saw (a line that
 * lasts less than a heartbeat and a sample is missed), the run's `totals` instead of each call's usage, approvals as
 * they enter and leave the pending list (who decided is not in the status), one `step` per step counter change, and
 * the end from the run's result. Its cursors cannot be resumed: each follower starts from now.
 */
import type { AgentRunResult, RunStatusView } from '../workflows/types.js';
import { pause } from '../contracts/run-events.js';
import { toolUseOf, type RunEvent, type ToolKind } from './events.js';

/** What sampling needs of a run handle. */
export interface SampledRun {
  status(options: { timeoutMs?: number }): Promise<RunStatusView>;
  result(): Promise<AgentRunResult>;
}

const kinds: readonly ToolKind[] = ['command', 'edit', 'read', 'other'];

export async function* sampleRunEvents(run: SampledRun, options: { signal?: AbortSignal; intervalMs?: number } = {}): AsyncGenerator<RunEvent, void, undefined> {
  const signal = options.signal ?? new AbortController().signal;
  const interval = options.intervalMs ?? 500;
  let n = 0;
  const base = (turn: number) => ({ cursor: `temporal:${++n}`, at: new Date().toISOString(), turn });
  let ended: { result?: AgentRunResult; error?: unknown } | undefined;
  const end = run.result().then(
    (result) => void (ended = { result }),
    (error: unknown) => void (ended = { error }),
  );
  let lastEvent: string | undefined;
  let tokens = -1;
  let stepSeq = -1;
  let pending = new Map<string, NonNullable<RunStatusView['pendingApprovals']>[number]>();
  while (!signal.aborted) {
    if (ended) {
      const r = ended.result;
      const reason = r ? (r.reason ?? r.result) : (ended.error as Error).message;
      yield { ...base(r?.iterations ?? 0), type: 'end', status: r?.status ?? 'unknown', ...(reason !== undefined ? { reason } : {}), ...(r?.failureType ? { failureType: r.failureType } : {}), source: 'temporal' };
      return;
    }
    const status = await run.status({ timeoutMs: 3000 }).catch(() => undefined);
    if (status) {
      const turn = status.inFlight?.turn ?? status.iteration;
      if (status.stepSeq !== stepSeq) {
        if (stepSeq >= 0) yield { ...base(turn), type: 'step', seq: status.stepSeq, step: status.detail };
        stepSeq = status.stepSeq;
      }
      const doing = status.inFlight?.lastEvent;
      if (doing && doing !== 'scheduled' && doing !== lastEvent) {
        const tool = toolUseOf(doing);
        yield { ...base(turn), type: 'activity', description: doing, ...(tool ? { tool } : {}) };
      }
      lastEvent = doing;
      const now = status.totalTokens + (status.inFlight?.tokens ?? 0);
      if (now !== tokens) {
        if (tokens >= 0 || now > 0) yield { ...base(turn), type: 'totals', tokens: now, costUsd: status.costUsd + (status.inFlight?.costUsd ?? 0) };
        tokens = now;
      }
      const next = new Map((status.pendingApprovals ?? []).map((p) => [p.requestId, p]));
      for (const [id, p] of next) {
        if (!pending.has(id)) yield { ...base(p.turn), type: 'approval-requested', tool: { name: p.tool, kind: kinds.find((k) => k === p.kind) ?? 'other' }, title: p.title };
      }
      for (const [id, p] of pending) if (!next.has(id)) yield { ...base(p.turn), type: 'approval-decided', tool: p.tool, decision: 'decided', decidedBy: 'unknown' };
      pending = next;
    }
    await Promise.race([end, pause(interval, signal)]);
  }
}
