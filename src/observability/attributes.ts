/**
 * Span attributes for runs and turns: tokens and cost. Pure and dependency-free: the workflow-side interceptor
 * (inside the workflow sandbox) and the activity-side one both use it.
 */
import { totalTokens } from '../contracts/usage.js';
import type { Usage } from '../adapters/types.js';

export type Attributes = Record<string, string | number | boolean>;

/** The attribute prefix of this project's own span attributes. */
export const attributePrefix = 'durable_harness';

const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** Token counts by kind (only the kinds the harness reported), their total, and the GenAI semantic-convention pair. */
export function usageAttributes(usage: unknown): Attributes {
  if (!isObject(usage)) return {};
  const out: Attributes = {};
  for (const [kind, value] of Object.entries(usage)) {
    if (typeof value === 'number' && Number.isFinite(value)) out[`${attributePrefix}.tokens.${snake(kind)}`] = value;
  }
  const total = totalTokens(usage as unknown as Usage);
  if (Number.isFinite(total)) out[`${attributePrefix}.tokens.total`] = total;
  if (typeof usage.input === 'number') out['gen_ai.usage.input_tokens'] = usage.input;
  if (typeof usage.output === 'number') out['gen_ai.usage.output_tokens'] = usage.output;
  return out;
}

function copy(out: Attributes, from: Record<string, unknown>, fields: readonly string[]): void {
  for (const field of fields) {
    const value = from[field];
    if (typeof value === 'string' || typeof value === 'boolean' || (typeof value === 'number' && Number.isFinite(value))) out[`${attributePrefix}.${snake(field)}`] = value;
  }
}

/** Who ran a turn: the frozen spec's names, reported by the turn activity once it has loaded the spec. */
export interface TurnIdentity {
  readonly agent: string;
  readonly harness: string;
  readonly driverClass: string;
  readonly vendor: string;
  readonly model: string;
}

/**
 * Attributes of a `runTurn` activity span from its request, the identity the activity reported, and its result
 * (whatever optional fields they carry). A result means the turn ended normally (`ok`).
 */
export function turnAttributes(input: unknown, identity: TurnIdentity | undefined, result: unknown): Attributes {
  const out: Attributes = {};
  if (isObject(input)) copy(out, input, ['turn']);
  if (identity) {
    copy(out, identity as unknown as Record<string, unknown>, ['agent', 'harness', 'driverClass', 'vendor', 'model']);
    out['gen_ai.request.model'] = identity.model;
  }
  if (isObject(result)) {
    out[`${attributePrefix}.ok`] = result.ok !== false;
    copy(out, result, ['code', 'costUsd', 'harnessCostUsd', 'costSource', 'costBlind', 'usageReported', 'resumed', 'durationMs']);
    if (typeof result.model === 'string') {
      out[`${attributePrefix}.reported_model`] = result.model;
      out['gen_ai.response.model'] = result.model;
    }
    Object.assign(out, usageAttributes(result.usage));
  }
  return out;
}

/** Attributes of a run's workflow span from its input and result. */
export function runAttributes(input: unknown, result?: unknown): Attributes {
  const out: Attributes = {};
  if (isObject(input)) {
    copy(out, input, ['agent', 'parentWorkflowId']);
    if (isObject(input.identity)) copy(out, input.identity, ['tenantId']);
  }
  if (isObject(result)) {
    copy(out, result, ['status', 'failureType', 'guardrail', 'iterations', 'costUsd']);
    Object.assign(out, usageAttributes(result.usage));
  }
  return out;
}
