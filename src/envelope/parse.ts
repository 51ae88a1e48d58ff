/**
 * The envelope parser: lenient about WHERE the JSON sits in a harness reply, strict about its SHAPE.
 * Workflow-safe: no Node built-ins, so the workflow itself can validate a turn's envelope.
 */
import { z } from 'zod';
import { validateJsonSchema, type JsonSchema } from './json-schema.js';
import type { NextStep, StepType } from '../contracts/envelope.js';

/** The five step types, in the order the contract presents them. */
export const STEP_TYPES = ['success', 'failed', 'actions', 'sub-agent', 'chat'] as const satisfies readonly StepType[];

/** One valid, single-line example of each step type (used in feedback and in the contract prompt). */
export const STEP_EXAMPLES = {
  success: '{"step":"success","result":"Created hello.txt containing a greeting."}',
  failed: '{"step":"failed","reason":"The repository has no test suite to run."}',
  actions:
    '{"step":"actions","actions":[{"name":"write_file","params":{"path":"hello.txt","content":"hi"}}],"message":"Writing the file."}',
  'sub-agent': '{"step":"sub-agent","agent":"reviewer","message":"Review the change in src/app.ts.","terminateAfter":false}',
  chat: '{"step":"chat","message":"Which branch should I base the change on?"}',
} as const satisfies Record<StepType, string>;

const actionCallSchema = z.strictObject({
  name: z.string().min(1),
  // Lenient default: a call with no parameters may omit `params`.
  params: z.record(z.string(), z.unknown()).default({}),
});

const stepSchemas = {
  success: z.strictObject({ step: z.literal('success'), result: z.string() }),
  failed: z.strictObject({ step: z.literal('failed'), reason: z.string() }),
  actions: z.strictObject({
    step: z.literal('actions'),
    actions: z.array(actionCallSchema).min(1),
    message: z.string().optional(),
  }),
  'sub-agent': z.strictObject({
    step: z.literal('sub-agent'),
    agent: z.string().min(1),
    message: z.string(),
    terminateAfter: z.boolean().default(false),
  }),
  chat: z.strictObject({ step: z.literal('chat'), message: z.string() }),
} as const;

/** The zod schema of a next-step envelope. */
export const nextStepSchema = z.discriminatedUnion('step', [
  stepSchemas.success,
  stepSchemas.failed,
  stepSchemas.actions,
  stepSchemas['sub-agent'],
  stepSchemas.chat,
]);

/** Parameters of an allowed action: a zod schema, or the JSON Schema `z.toJSONSchema` made of it. */
export type ActionParameters = z.ZodType | JsonSchema;

/** What the envelope may ask for in this run. */
export interface EnvelopeRules {
  readonly allowedActions: Readonly<Record<string, { readonly parameters: ActionParameters }>>;
  readonly allowedSubAgents: readonly string[];
  /** Action calls one envelope may ask for (catalog `maxActionsPerEnvelope`; absent in specs frozen before it: the default). */
  readonly maxActions?: number;
}

/** Action calls per envelope when the catalog says nothing: an envelope asking for more runs none of them. */
export const DEFAULT_MAX_ACTIONS_PER_ENVELOPE = 100;
/**
 * The most `maxActionsPerEnvelope` may be: every call travels through workflow history (its name, and a problem
 * when it is refused), and the turn's result and the next turn's request must stay far below Temporal's 2 MiB.
 */
export const MAX_ACTIONS_PER_ENVELOPE_LIMIT = 1000;
/** How many problems one feedback lists; the rest are counted. */
const MAX_PROBLEM_LINES = 20;

/** Why one action call (or the sub-agent request) will not run; the workflow reports it back as an error result. */
export interface ActionCallError {
  /** Index in `actions` (0 for a sub-agent step). */
  readonly index: number;
  /** Action name (or sub-agent name). */
  readonly name: string;
  readonly kind: 'unknown-action' | 'invalid-params' | 'unknown-sub-agent';
  readonly problem: string;
}

/** Per action call: run it with `params` (defaults applied), or report `problem` without running it. */
export type ActionCallVerdict =
  | { readonly index: number; readonly name: string; readonly ok: true; readonly params: Record<string, unknown> }
  | (ActionCallError & { readonly ok: false });

/** A parsed envelope: a well-formed step plus the calls that must not run, or the shape-level problem. */
export type EnvelopeParseResult =
  | { readonly ok: true; readonly step: NextStep; readonly actionErrors: readonly ActionCallError[] }
  | {
      readonly ok: false;
      readonly problem: string;
      /** Set when the envelope asked for more action calls than the rules allow (none of them runs). */
      readonly actionsOverCap?: { readonly asked: number; readonly cap: number };
    };

/** The opening words of every feedback turn; the demo harness keys on them. */
export const FEEDBACK_PREFIX = 'Your last reply was not a valid envelope';

const NOT_FOUND = 'no JSON object with a "step" field found';
/** How many `{"step"` openings the fallback scan tries, newest first; bounds work on huge replies. */
const FALLBACK_CANDIDATES = 64;

/** Index just past the `}` that closes the object opened at `open`, or -1; respects strings and escapes. */
export function matchObjectEnd(text: string, open: number): number {
  let depth = 0;
  let inString = false;
  let escaped = false;
  for (let j = open; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (inString) {
      if (escaped) escaped = false;
      else if (c === 0x5c /* \ */) escaped = true;
      else if (c === 0x22 /* " */) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */) depth++;
    else if (c === 0x7d /* } */) {
      depth--;
      if (depth === 0) return j + 1;
    }
  }
  return -1;
}

interface Extraction {
  readonly value?: Record<string, unknown>;
  /** Best explanation of why nothing was found. */
  readonly problem?: string;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function tryParse(text: string): { value?: unknown; error?: string } {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
}

/** Balanced top-level `{...}` spans, left to right; stops at the first that never closes (linear time). */
function topLevelSpans(text: string): { start: number; end: number }[] {
  const spans: { start: number; end: number }[] = [];
  let i = 0;
  for (;;) {
    const open = text.indexOf('{', i);
    if (open < 0) break;
    const end = matchObjectEnd(text, open);
    if (end < 0) break;
    spans.push({ start: open, end });
    i = end;
  }
  return spans;
}

/** Openings of the form `{ "step"` — where an envelope starts even if prose braces confused the top-level scan. */
function stepOpenings(text: string): number[] {
  const found: number[] = [];
  const re = /\{\s*"step"\s*:/g;
  for (let m = re.exec(text); m; m = re.exec(text)) found.push(m.index);
  return found.slice(-FALLBACK_CANDIDATES);
}

/** Finds the LAST JSON object with a `step` key, wherever it sits in the reply. */
export function extractEnvelopeObject(text: string): Extraction {
  let lastKeys: string[] | undefined;
  let invalidJson: string | undefined;
  const consider = (start: number, end: number): Record<string, unknown> | undefined => {
    const slice = text.slice(start, end);
    const parsed = tryParse(slice);
    if (parsed.error !== undefined) {
      if (/"step"\s*:/.test(slice)) invalidJson ??= parsed.error;
      return undefined;
    }
    if (!isPlainObject(parsed.value)) return undefined;
    if ('step' in parsed.value) return parsed.value;
    lastKeys ??= Object.keys(parsed.value);
    return undefined;
  };

  const spans = topLevelSpans(text);
  for (let k = spans.length - 1; k >= 0; k--) {
    const span = spans[k]!;
    const value = consider(span.start, span.end);
    if (value) return { value };
  }
  const openings = stepOpenings(text);
  for (let k = openings.length - 1; k >= 0; k--) {
    const start = openings[k]!;
    const end = matchObjectEnd(text, start);
    if (end < 0) {
      invalidJson ??= 'the object is never closed (missing "}")';
      continue;
    }
    const value = consider(start, end);
    if (value) return { value };
  }

  if (text.trim() === '') return { problem: `the reply was empty; ${NOT_FOUND}` };
  if (invalidJson !== undefined) {
    return { problem: `found an object with a "step" field but it is not valid JSON: ${invalidJson}` };
  }
  if (lastKeys !== undefined) {
    return { problem: `${NOT_FOUND} (found a JSON object with fields: ${lastKeys.join(', ') || 'none'})` };
  }
  return { problem: NOT_FOUND };
}

function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else {
      const s = String(key);
      out += /^[A-Za-z_$][\w$]*$/.test(s) ? (out ? `.${s}` : s) : `[${JSON.stringify(s)}]`;
    }
  }
  return out;
}

function allowedFieldsAt(step: StepType, path: readonly PropertyKey[]): string[] | undefined {
  if (path.length === 0) return Object.keys(stepSchemas[step].shape);
  if (step === 'actions' && path.length === 2 && path[0] === 'actions') return Object.keys(actionCallSchema.shape);
  return undefined;
}

/** Renders zod issues as `path: what is wrong` lines; `prefix` is prepended to every path. */
export function describeZodIssues(
  issues: readonly z.core.$ZodIssue[],
  prefix: readonly PropertyKey[] = [],
  allowedAt?: (path: readonly PropertyKey[]) => string[] | undefined,
): string[] {
  const lines: string[] = [];
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    const where = formatPath(path) || '(envelope)';
    if (issue.code === 'unrecognized_keys') {
      const allowed = allowedAt?.(issue.path);
      for (const key of issue.keys) {
        lines.push(
          `${formatPath([...path, key])}: unexpected field${allowed ? ` (allowed: ${allowed.join(', ')})` : ''}`,
        );
      }
    } else if (issue.code === 'invalid_type') {
      const expected = issue.expected === 'record' ? 'object' : issue.expected;
      lines.push(
        issue.message.endsWith('received undefined')
          ? `${where}: missing required field (${expected})`
          : `${where}: expected ${expected}${receivedOf(issue.message)}`,
      );
    } else {
      lines.push(`${where}: ${issue.message.replace(/^Invalid input: /, '')}`);
    }
  }
  return lines;
}

function receivedOf(message: string): string {
  const m = /received (\w+)$/.exec(message);
  return m ? `, got ${m[1]}` : '';
}

/** The first problems joined, the rest counted: an envelope with a million bad fields gets a short answer. */
function joinProblems(lines: readonly string[]): string {
  if (lines.length <= MAX_PROBLEM_LINES) return lines.join('; ');
  return `${lines.slice(0, MAX_PROBLEM_LINES).join('; ')}; … and ${lines.length - MAX_PROBLEM_LINES} more problems`;
}

/** What the harness is told about an envelope over the action cap. */
export function actionsOverCapProblem(asked: number, cap: number): string {
  return (
    `the envelope asks for ${asked} actions, over this agent's cap of ${cap} actions per envelope (maxActionsPerEnvelope), ` +
    `so none of them ran; ask for at most ${cap} actions per envelope and send the rest in later turns`
  );
}

function withExample(problem: string, step?: StepType): string {
  const example = step ? STEP_EXAMPLES[step] : STEP_EXAMPLES.success;
  return `${problem}. Example of a valid ${step ? `"${step}" ` : ''}envelope: ${example}`;
}

/** Validates the envelope's shape only (no rules): the step, or exactly what was wrong. */
export function validateEnvelopeShape(value: Record<string, unknown>):
  | { readonly ok: true; readonly step: NextStep }
  | { readonly ok: false; readonly problem: string } {
  const stepValue = value.step;
  if (typeof stepValue !== 'string' || !(STEP_TYPES as readonly string[]).includes(stepValue)) {
    return {
      ok: false,
      problem: withExample(`"step" must be one of ${STEP_TYPES.join(', ')} (got ${JSON.stringify(stepValue)})`),
    };
  }
  const step = stepValue as StepType;
  const result = stepSchemas[step].safeParse(value);
  if (!result.success) {
    const lines = describeZodIssues(result.error.issues, [], (p) => allowedFieldsAt(step, p));
    return { ok: false, problem: withExample(joinProblems(lines), step) };
  }
  return { ok: true, step: result.data as NextStep };
}

function isZodSchema(p: ActionParameters): p is z.ZodType {
  return typeof (p as { safeParse?: unknown }).safeParse === 'function';
}

/** Checks one call's params against its action's parameters; returns the params to run with, or the problems. */
export function checkActionParams(
  parameters: ActionParameters,
  params: Record<string, unknown>,
  index: number,
): { ok: true; params: Record<string, unknown> } | { ok: false; problem: string } {
  if (isZodSchema(parameters)) {
    const result = parameters.safeParse(params);
    if (result.success) return { ok: true, params: result.data as Record<string, unknown> };
    return { ok: false, problem: joinProblems(describeZodIssues(result.error.issues, ['actions', index, 'params'])) };
  }
  const checked = validateJsonSchema(parameters, params, `actions[${index}].params`);
  if (checked.problems.length === 0) return { ok: true, params: checked.value as Record<string, unknown> };
  return { ok: false, problem: joinProblems(checked.problems.map((p) => `${p.path}: ${p.message}`)) };
}

/** Decides, per action call (or for the sub-agent request), whether it may run; unknown names are errors, not parse failures. */
export function checkActionCalls(step: NextStep, rules: EnvelopeRules): ActionCallVerdict[] {
  if (step.step === 'sub-agent') {
    if (rules.allowedSubAgents.includes(step.agent)) return [];
    const known = rules.allowedSubAgents.length ? rules.allowedSubAgents.join(', ') : 'none';
    return [
      {
        index: 0,
        name: step.agent,
        ok: false,
        kind: 'unknown-sub-agent',
        problem: `sub-agent "${step.agent}" is not available to this agent (allowed: ${known})`,
      },
    ];
  }
  if (step.step !== 'actions') return [];
  return step.actions.map((call, index): ActionCallVerdict => {
    const allowed = Object.prototype.hasOwnProperty.call(rules.allowedActions, call.name)
      ? rules.allowedActions[call.name]
      : undefined;
    if (!allowed) {
      const known = Object.keys(rules.allowedActions).sort();
      return {
        index,
        name: call.name,
        ok: false,
        kind: 'unknown-action',
        problem: `actions[${index}].name: action "${call.name}" is not available (allowed: ${known.length ? known.join(', ') : 'none'})`,
      };
    }
    const checked = checkActionParams(allowed.parameters, call.params, index);
    return checked.ok
      ? { index, name: call.name, ok: true, params: checked.params }
      : { index, name: call.name, ok: false, kind: 'invalid-params', problem: checked.problem };
  });
}

/** Parses a harness reply into a next step plus the action calls that must be reported instead of run. */
export function parseEnvelope(text: string, rules: EnvelopeRules): EnvelopeParseResult {
  const found = extractEnvelopeObject(text);
  if (!found.value) return { ok: false, problem: withExample(found.problem ?? NOT_FOUND) };
  // Counted before anything else looks at the calls: an envelope over the cap costs no validation, and runs nothing.
  const calls = found.value.step === 'actions' ? found.value.actions : undefined;
  const cap = rules.maxActions ?? DEFAULT_MAX_ACTIONS_PER_ENVELOPE;
  if (Array.isArray(calls) && calls.length > cap) {
    return { ok: false, problem: actionsOverCapProblem(calls.length, cap), actionsOverCap: { asked: calls.length, cap } };
  }
  const shaped = validateEnvelopeShape(found.value);
  if (!shaped.ok) return shaped;
  const actionErrors = checkActionCalls(shaped.step, rules)
    .filter((v): v is ActionCallError & { ok: false } => !v.ok)
    .map(({ index, name, kind, problem }) => ({ index, name, kind, problem }));
  return { ok: true, step: shaped.step, actionErrors };
}

/** The text of the feedback turn sent after a malformed envelope. */
export function formatFeedback(problem: string): string {
  return [
    `${FEEDBACK_PREFIX}: ${problem}`,
    '',
    'Reply again and end your reply with exactly one JSON object with a "step" field ' +
      `(one of ${STEP_TYPES.join(', ')}), with no other fields than that step type allows.`,
  ].join('\n');
}
