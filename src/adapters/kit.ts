/** Small helpers every driver uses: capabilities, its home below the workspace, catalog settings, JSON lines, session errors. */
import path from 'node:path';
import type { z } from 'zod';
import type { DriverTurn, Mapped } from './driver.js';
import type { Capabilities, SessionErrorCode, TerminalEvent } from './types.js';

/**
 * The capabilities of a CLI that resumes its sessions natively, takes a system prompt and has a two-way mode that
 * asks before a tool runs (each of the five built-in CLIs); `extra` adds or overrides (`sessionFork`).
 */
export function cliCapabilities(extra: Partial<Capabilities> = {}): Capabilities {
  return { sessionResume: true, permissionHooks: true, systemPrompt: true, ...extra };
}

/** A driver's home: `.home/<dir>` below the workspace — `rel` for the sandbox's files, `path` as the harness sees it. */
export interface DriverHome {
  readonly rel: string;
  readonly path: string;
}

/** The per-run home for one driver, `<workspace>/.home/<dir>`, never the worker's real home. */
export function driverHome(turn: Pick<DriverTurn, 'workspacePath'>, dir: string): DriverHome {
  const rel = path.posix.join('.home', dir);
  // POSIX separators: it is the path inside the (Linux) sandbox.
  return { rel, path: path.posix.join(turn.workspacePath, rel) };
}

/** A path below a home. */
export function below(home: DriverHome, ...segments: string[]): DriverHome {
  return { rel: path.posix.join(home.rel, ...segments), path: path.posix.join(home.path, ...segments) };
}

/** A string setting from the catalog's driver-specific `settings`, if present. */
export function stringSetting(turn: Pick<DriverTurn, 'settings'>, key: string): string | undefined {
  const value = turn.settings[key];
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/** A numeric setting from the catalog's driver-specific `settings`, if present. */
export function numberSetting(turn: Pick<DriverTurn, 'settings'>, key: string): number | undefined {
  const value = turn.settings[key];
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/** Parses one line as JSON; `undefined` when it is not JSON (the caller maps it to an `unknown` event). */
export function parseJsonLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** What a line handler gets: the validated line, and the raw text (for an `unknown` event). */
export type LineHandler<T> = (value: T, line: string) => Mapped | Promise<Mapped>;

/**
 * A `LineMapper.line` for a CLI that prints one JSON object per line, each with a `type`: the line is validated by
 * `schema` (a union ending in a catch-all `{ type: string }`, so a new line type never breaks a run) and handed to
 * the handler for its type. A line that is not JSON, fails the schema, or has a type without a handler becomes an
 * `unknown` event; a handler that returns `undefined` means "nothing to report".
 */
export function jsonLines<T extends { readonly type: string }>(schema: z.ZodType<T>, handlers: Readonly<Record<string, LineHandler<T>>>): (line: string) => Mapped | Promise<Mapped> {
  return (line) => {
    const parsed = schema.safeParse(parseJsonLine(line));
    if (!parsed.success || !Object.hasOwn(handlers, parsed.data.type)) return { type: 'unknown', raw: line };
    return handlers[parsed.data.type]!(parsed.data, line);
  };
}

/** A `session-error` terminal event. */
export function sessionError(code: SessionErrorCode, message: string, extra?: { exitCode?: number | null; stderrTail?: string }): TerminalEvent {
  return { type: 'session-error', code, message, ...extra };
}

/** How a driver names its CLI and its sessions in `resume-failed` messages. */
export interface HarnessNames {
  readonly label: string;
  /** What the CLI calls a session ("thread" for codex). */
  readonly noun?: string;
}

/**
 * The terminal event for "the harness does not know the session this turn resumed": the runtime then starts a fresh
 * session and replays the conversation.
 */
export function resumeFailed(
  names: HarnessNames,
  turn: Pick<DriverTurn, 'resumeSessionId'>,
  detail: { reason?: string; exitCode?: number | null; stderrTail?: string } = {},
): TerminalEvent {
  const { reason, ...extra } = detail;
  const why = reason !== undefined ? ` (${reason})` : '';
  return sessionError(
    'resume-failed',
    `${names.label} no longer knows ${names.noun ?? 'session'} ${turn.resumeSessionId ?? '(none)'}${why}; start a fresh session and replay the conversation.`,
    extra,
  );
}

/** `resumeFailed` when a resumed turn's stderr matches the CLI's "unknown session" message; else `undefined`. */
export function resumeFailedOnExit(names: HarnessNames, pattern: RegExp, turn: Pick<DriverTurn, 'resumeSessionId'>, code: number | null, stderrTail: string): TerminalEvent | undefined {
  if (turn.resumeSessionId === undefined || !pattern.test(stderrTail)) return undefined;
  return resumeFailed(names, turn, { exitCode: code, stderrTail });
}
