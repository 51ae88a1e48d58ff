/**
 * Activity interceptor: tokens and cost of each turn, as attributes of the activity's span (when tracing is on)
 * and as metrics through the SDK runtime's meter (exported when Prometheus or OTLP metrics are on):
 *
 *   durable_harness_turns_total{agent,harness,outcome}    turns that ended (ok, resume-failed, error)
 *   durable_harness_tokens_total{agent,harness,kind}      tokens by kind (input, output, cache_read, ...)
 *   durable_harness_turn_cost_usd{agent,harness}          histogram of per-turn cost (its _sum is the spend)
 *
 * (Names as Prometheus shows them; the runtime adds namespace, taskQueue and activityType labels.)
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import * as otel from '@opentelemetry/api';
import type { Context as ActivityContext } from '@temporalio/activity';
import type { MetricCounter, MetricHistogram, MetricMeter } from '@temporalio/common';
import type { ActivityExecuteInput, ActivityInboundCallsInterceptor, Next } from '@temporalio/worker';
import { attributePrefix, turnAttributes, type TurnIdentity } from './attributes.js';

/** The turn activity's name (see src/activities). */
export const turnActivityType = 'runTurn';

interface TurnMetrics {
  readonly turns: MetricCounter;
  readonly tokens: MetricCounter;
  readonly cost: MetricHistogram;
}

/** The running turn's identity, filled in by the activity (the request carries only the spec's hash). */
const currentTurn = new AsyncLocalStorage<{ identity?: TurnIdentity }>();

/**
 * Called by the turn activity once it knows the frozen spec: names the turn's span (agent, harness, model) and its
 * metrics. A no-op outside the interceptor (tests that call the activity directly).
 */
export function reportTurnIdentity(identity: TurnIdentity): void {
  const slot = currentTurn.getStore();
  if (!slot) return;
  slot.identity = identity;
  otel.trace.getActiveSpan()?.setAttributes(turnAttributes(undefined, identity, undefined));
}

const metricsByMeter = new WeakMap<MetricMeter, TurnMetrics>();

function turnMetrics(meter: MetricMeter): TurnMetrics {
  let metrics = metricsByMeter.get(meter);
  if (!metrics) {
    metrics = {
      turns: meter.createCounter('durable_harness_turns', 'turns', 'Agent turns that ended, by outcome'),
      tokens: meter.createCounter('durable_harness_tokens', 'tokens', 'Tokens used by agent turns, by kind'),
      cost: meter.createHistogram('durable_harness_turn_cost_usd', 'float', 'usd', 'Cost of each agent turn in USD'),
    };
    metricsByMeter.set(meter, metrics);
  }
  return metrics;
}

export class TurnTelemetryInterceptor implements ActivityInboundCallsInterceptor {
  constructor(private readonly ctx: ActivityContext) {}

  async execute(input: ActivityExecuteInput, next: Next<ActivityInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    if (this.ctx.info.activityType !== turnActivityType) return next(input);
    const span = otel.trace.getActiveSpan();
    const meter = this.ctx.metricMeter;
    const slot: { identity?: TurnIdentity } = {};
    span?.setAttributes(turnAttributes(input.args[0], undefined, undefined));
    const tags = () => ({ agent: slot.identity?.agent ?? '', harness: slot.identity?.harness ?? '' });
    let result: unknown;
    try {
      result = await currentTurn.run(slot, () => next(input));
    } catch (err) {
      turnMetrics(meter).turns.add(1, { ...tags(), outcome: 'error' });
      throw err;
    }
    const attributes = turnAttributes(input.args[0], slot.identity, result);
    span?.setAttributes(attributes);
    const metrics = turnMetrics(meter);
    const ok = attributes[`${attributePrefix}.ok`];
    metrics.turns.add(1, { ...tags(), outcome: ok === false ? String(attributes[`${attributePrefix}.code`] ?? 'not-ok') : 'ok' });
    const tokenPrefix = `${attributePrefix}.tokens.`;
    for (const [key, value] of Object.entries(attributes)) {
      if (key.startsWith(tokenPrefix) && key !== `${tokenPrefix}total` && typeof value === 'number' && value > 0) {
        metrics.tokens.add(Math.round(value), { ...tags(), kind: key.slice(tokenPrefix.length) });
      }
    }
    const cost = attributes[`${attributePrefix}.cost_usd`];
    if (typeof cost === 'number') metrics.cost.record(cost, tags());
    return result;
  }
}
