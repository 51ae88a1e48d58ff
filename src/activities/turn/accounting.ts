/**
 * Accounting inside one turn attempt: every usage event the harness streams becomes a ledger row at once
 * (idempotent by attempt and call), priced by the one cost rule, and checked against the run's remaining budget.
 * Ledger writes go through a queue that retries faults instead of failing the turn: accounting waits until its rows
 * land (progress events, best effort, are progress-events.ts).
 */
import type { Usage } from '../../adapters/types.js';
import type { Prices } from '../../catalog/schema.js';
import { attemptCost, priceUsage } from '../../contracts/cost.js';
import type { AttemptFinish, AttemptStart, CostView, Ledger, UsageRecord } from '../../ledger/types.js';
import { addUsage, checkedUsage, costOf, noUsage, totalTokens, usageKnown } from '../../contracts/usage.js';
import type { TurnBudget } from '../../workflows/types.js';
import { isRetryable } from '../ledger-wait.js';
import { RetryingWriter } from './retrying-writer.js';

export type { TurnBudget };

/** A budget the turn's streaming usage crossed. */
export interface BudgetCrossing {
  readonly guardrail: 'tokens' | 'cost';
  readonly reason: string;
}

/** A call's figures as its ledger row holds them (unknown-ness is the row's NULL counts). */
function rowOf(call: { usage: Usage; priceUsd?: number; harnessCostUsd?: number }): Pick<UsageRecord, 'usage' | 'priceUsd' | 'harnessCostUsd'> {
  return { usage: call.usage, ...(call.priceUsd !== undefined ? { priceUsd: call.priceUsd } : {}), ...(call.harnessCostUsd !== undefined ? { harnessCostUsd: call.harnessCostUsd } : {}) };
}

/** One attempt's identity in the ledger. */
export interface AttemptIdentity {
  readonly workflowId: string;
  readonly runId?: string;
  readonly turn: number;
  readonly attempt: number;
  readonly attemptId: string;
}

/** What an attempt has spent so far. */
export interface AttemptSpend extends CostView {
  readonly usage: Usage;
  readonly calls: number;
  /** Usage events that said tokens were spent without saying how many. */
  readonly unknownCalls: number;
}

/**
 * The accounting of one turn attempt. `begin` opens the prompt run (and waits for the ledger), `recordUsage` is
 * called for every usage event as it streams, `finish` closes the attempt and waits until every row landed.
 */
export class TurnAccounting {
  private readonly writer: RetryingWriter;
  private readonly calls: { usage: Usage; priceUsd?: number; harnessCostUsd?: number; unknown: boolean }[] = [];
  private unknownCalls = 0;
  /** What earlier attempts of this scheduling spent (the workflow's budget did not know about them). */
  private earlier: { tokens: number; costUsd: number } = { tokens: 0, costUsd: 0 };
  private sameScheduling: ((attemptId: string) => boolean) | undefined;

  constructor(
    private readonly ledger: Ledger,
    private readonly id: AttemptIdentity,
    private readonly options: {
      readonly prices?: Prices;
      readonly budget?: TurnBudget;
      readonly onFault?: (err: Error | undefined) => void;
      /** A row given up (only by `stop`): logged, so an operator can still enter it. */
      readonly onAbandoned?: (row: unknown, reason: string) => void;
      /** A usage row is durable (written, or already there): the harness may be told (`usage-ack`). */
      readonly onRecorded?: (ack: { attemptId: string; call: number }) => void;
    } = {},
  ) {
    this.writer = new RetryingWriter({ isPermanent: (err) => !isRetryable(err), onFault: options.onFault, onAbandoned: options.onAbandoned });
  }

  /** `begin` succeeded: the attempt has a prompt run to close. */
  begun = false;

  /** A usage row is durable: the harness may be told (`usage-ack`); set once the adapter exists. */
  onRecorded: ((ack: { attemptId: string; call: number }) => void) | undefined;

  /** The attempt's ledger id. */
  get attemptId(): string {
    return this.id.attemptId;
  }

  /** The error accounting writes are waiting on, if any. */
  get fault(): Error | undefined {
    return this.writer.fault;
  }

  /**
   * Opens the attempt's prompt run, waiting (retrying) while the ledger cannot take it; rejects only when an id does
   * not resolve (UnresolvedAccountingError). `sameScheduling` names earlier attempts whose spend counts against the
   * budget this turn was given.
   */
  async begin(start: Omit<AttemptStart, keyof AttemptIdentity | 'priced'>, sameScheduling?: (attemptId: string) => boolean): Promise<void> {
    const row = { ...start, ...this.id, priced: this.options.prices !== undefined };
    await this.writer.enqueue(() => this.ledger.beginAttempt(row), row);
    this.begun = true;
    this.sameScheduling = sameScheduling;
    if (sameScheduling && this.options.budget) {
      await this.writer.enqueue(async () => {
        const rows = await this.ledger.listPromptRuns(this.id.workflowId, this.id.runId);
        const mine = rows.filter((r) => r.turn === this.id.turn && r.attemptId !== this.id.attemptId && sameScheduling(r.attemptId));
        this.earlier = { tokens: mine.reduce((n, r) => n + totalTokens(r.usage), 0), costUsd: mine.reduce((n, r) => n + r.costUsd, 0) };
      });
    }
  }

  /**
   * Records one usage event (the function the turn calls per event): queues its ledger row and returns the budget
   * it crossed, if any. Never throws and never waits: the row is written (and retried) in order, in the background.
   */
  recordUsage(event: { usage: Usage; costUsd?: number; call?: number }): BudgetCrossing | undefined {
    const call = this.priced(event);
    this.calls.push(call);
    if (call.unknown) this.unknownCalls += 1;
    // The harness's own call number when it gives one, so a re-report of this call lands on the same row.
    this.write({ ...this.id, call: event.call ?? this.calls.length, ...rowOf(call) });
    return this.crossed();
  }

  /**
   * Records a call of an EARLIER attempt that its harness re-reported (its worker died before recording it): booked
   * to that attempt, idempotently, and counted against this scheduling's budget when it belongs to it.
   */
  recordRecovered(event: { usage: Usage; costUsd?: number; recovered: { attemptId: string; turn: number; call: number } }): BudgetCrossing | undefined {
    const call = this.priced(event);
    const { attemptId, turn, call: number } = event.recovered;
    // Counted against this scheduling's budget only if it was really missing (the ledger row is new): calls already
    // recorded are in `earlier` since `begin`.
    const count = this.sameScheduling?.(attemptId)
      ? () => {
          this.earlier = { tokens: this.earlier.tokens + totalTokens(event.usage), costUsd: this.earlier.costUsd + (call.priceUsd ?? call.harnessCostUsd ?? 0) };
        }
      : undefined;
    this.write({ workflowId: this.id.workflowId, runId: this.id.runId, attemptId, turn, call: number, ...rowOf(call) }, count);
    return this.crossed();
  }

  /** One call's row: counts that are not valid (NaN, 1e308, fractional) make it unknown, never a number in a sum. */
  private priced(event: { usage: Usage; costUsd?: number }): { usage: Usage; priceUsd?: number; harnessCostUsd?: number; unknown: boolean } {
    const usage = checkedUsage(event.usage);
    const harnessCostUsd = costOf(event.costUsd);
    const priceUsd = this.options.prices ? priceUsage(this.options.prices, usage) : undefined;
    return { usage, ...(priceUsd !== undefined ? { priceUsd } : {}), ...(harnessCostUsd !== undefined ? { harnessCostUsd } : {}), unknown: !usageKnown(usage) };
  }

  private write(row: UsageRecord, onInserted?: () => void): void {
    let inserted = false;
    void this.writer
      .enqueue(async () => {
        inserted = (await this.ledger.recordUsage(row)).inserted;
      }, row)
      .then(() => {
        if (inserted) onInserted?.();
        (this.onRecorded ?? this.options.onRecorded)?.({ attemptId: row.attemptId, call: row.call });
      })
      .catch(() => undefined);
  }

  /** What the attempt has spent so far, priced by the one cost rule. */
  spend(usageMissing = false): AttemptSpend {
    const cost = attemptCost(this.calls, { priced: this.options.prices !== undefined, usageMissing: usageMissing || this.unknownCalls > 0 });
    return { usage: this.calls.reduce((u, c) => addUsage(u, c.usage), noUsage), calls: this.calls.length, unknownCalls: this.unknownCalls, ...cost };
  }

  private crossed(): BudgetCrossing | undefined {
    const budget = this.options.budget;
    if (!budget) return undefined;
    const spent = this.spend();
    const tokens = this.earlier.tokens + totalTokens(spent.usage);
    const cost = this.earlier.costUsd + spent.costUsd;
    if (budget.tokens !== undefined && tokens >= budget.tokens) {
      return { guardrail: 'tokens', reason: `token budget spent mid-turn: ${tokens} of the ${budget.tokens} left for this turn` };
    }
    if (budget.costUsd !== undefined && cost >= budget.costUsd) {
      return { guardrail: 'cost', reason: `cost budget spent mid-turn: $${cost.toFixed(4)} of the $${budget.costUsd.toFixed(4)} left for this turn` };
    }
    return undefined;
  }

  /** Closes the attempt and waits until every row of it landed in the ledger (retrying faults meanwhile). */
  async finish(finish: Omit<AttemptFinish, keyof AttemptIdentity>): Promise<void> {
    const row = { ...finish, ...this.id };
    await this.writer.enqueue(() => this.ledger.finishAttempt(row), row);
    await this.writer.drain();
  }

  /**
   * Gives up on writes still waiting: only when the attempt was cancelled and the ledger stayed unwritable for the
   * grace period after it. Each row given up goes to `onAbandoned` (the worker's log).
   */
  stop(reason: string): void {
    this.writer.stop(reason);
  }
}
