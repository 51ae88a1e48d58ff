/** The stdio-JSON vocabulary (docs/stdio-json.md): what a harness prints, and what the runtime writes. */
import { z } from 'zod';

/**
 * Any number (a NaN or 1e999 arrives as one too): a count that is not a whole number from 0 to the bound is not a
 * protocol error but an unreadable report, refused as unknown usage (src/workflows/usage.ts `usageOf`).
 */
const count = z.custom<number>((v) => typeof v === 'number', { message: 'expected a number' });

/** Harness → runtime lines we understand. Unknown fields are ignored so harnesses can add their own. */
export const sessionLine = z.object({
  type: z.literal('session'),
  id: z.string().min(1),
  resumed: z.boolean().nullish(),
  model: z.string().nullish(),
});
export const textLine = z.object({ type: z.literal('text'), text: z.string() });
export const activityLine = z.object({ type: z.literal('activity'), description: z.string() });
export const permissionLine = z.object({
  type: z.literal('permission'),
  id: z.string().min(1),
  tool: z.string(),
  input: z.unknown().optional(),
  /** What the tool does; guessed from the tool name when absent. */
  kind: z.enum(['command', 'edit', 'read', 'other']).nullish(),
  /** One line for the operator; defaults to the command or the tool name. */
  title: z.string().nullish(),
  /** The shell command (kind `command`); defaults to `input.command` / `input.cmd` when that is a string. */
  command: z.string().nullish(),
  /** Files the tool touches; defaults to `input.path` / `input.file_path` / `input.filePath`. */
  paths: z.array(z.string()).nullish(),
  /** The harness runs the `input` of an allowing answer instead of its own (so edits can be native). */
  editable: z.boolean().nullish(),
});
/**
 * Strict, unlike the other lines: a misspelt count (`input_tokens`, `outputTokens`) would otherwise vanish and the
 * tokens count as nothing, so any field not listed here makes the line a protocol error.
 */
export const usageLine = z.strictObject({
  type: z.literal('usage'),
  input: count.nullish(),
  output: count.nullish(),
  cacheRead: count.nullish(),
  cacheWrite: count.nullish(),
  reasoning: count.nullish(),
  costUsd: count.nullish(),
  /** The harness's number for this call within its attempt (1, 2, …): makes a re-report idempotent. */
  call: z.number().int().positive().nullish(),
  /** Re-reports only: the attempt (from its request's `attempt`) and turn the call belongs to. */
  attempt: z.string().min(1).nullish(),
  turn: z.number().int().positive().nullish(),
  /** The vendor's own usage object, if the harness passes it on: opaque, never counted (the fields above are). */
  raw: z.unknown().optional(),
});
export const completeLine = z.object({
  type: z.literal('complete'),
  text: z.string(),
  sessionId: z.string().min(1).nullish(),
  resumed: z.boolean().nullish(),
  model: z.string().nullish(),
});
export const errorCodes = ['process-exit', 'timeout', 'cancelled', 'resume-failed', 'vendor-error', 'protocol-error'] as const;
export const errorLine = z.object({
  type: z.literal('error'),
  message: z.string(),
  // A code we do not know is still an error: it becomes vendor-error rather than failing validation.
  code: z.string().nullish(),
});
/** Any other typed line: a newer harness's event that must never crash a run. */
export const otherLine = z.object({ type: z.string() }).loose();

/**
 * Every harness line. Note a known `type` with bad fields also matches `otherLine`; the adapter therefore
 * validates known types with their own schema first (see `knownLines`) and only then falls back.
 */
export const harnessLine = z.union([sessionLine, textLine, activityLine, permissionLine, usageLine, completeLine, errorLine, otherLine]);
export type HarnessLine = z.infer<typeof harnessLine>;

/** The known line schemas by `type`. */
export const knownLines = {
  session: sessionLine,
  text: textLine,
  activity: activityLine,
  permission: permissionLine,
  usage: usageLine,
  complete: completeLine,
  error: errorLine,
} as const;

/** Runtime → harness: the one request line that starts a turn. */
export const turnRequest = z.strictObject({
  type: z.literal('turn'),
  prompt: z.string(),
  turn: z.number().int().positive(),
  systemPrompt: z.string().nullable(),
  sessionId: z.string().nullable(),
  /** Only when true: continue `sessionId` in a NEW session branched from it, leaving it as it was. */
  fork: z.literal(true).optional(),
  /** The ledger id of this attempt: usage lines the harness re-reports later carry it (see `usage-ack`). */
  attempt: z.string().optional(),
  model: z.string().nullable(),
  workspace: z.string(),
  permissions: z.enum(['strict', 'auto', 'dangerous']),
});
export type TurnRequest = z.infer<typeof turnRequest>;

/** Runtime → harness: a usage line is durable in the ledger; the harness need never re-report it. */
export const usageAck = z.strictObject({
  type: z.literal('usage-ack'),
  attempt: z.string(),
  call: z.number().int().positive(),
});
export type UsageAck = z.infer<typeof usageAck>;

/** Runtime → harness: the answer to a `permission` line. */
export const permissionResponse = z.strictObject({
  type: z.literal('permission-response'),
  id: z.string(),
  allow: z.boolean(),
  message: z.string().optional(),
  /** The edited input to run instead (only to harnesses that said `editable: true`). */
  input: z.unknown().optional(),
});
export type PermissionResponse = z.infer<typeof permissionResponse>;
