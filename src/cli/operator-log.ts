/**
 * The worker's log as an operator reads it in a terminal: one line when a run starts and when it ends, one short
 * line per failed attempt, and warnings without stacks, task tokens or metadata dumps.
 */
import type { LogLevel, LogMetadata, Logger } from '@temporalio/common';
import { escapeControl } from './escape.js';

const rank: Record<LogLevel, number> = { TRACE: 0, DEBUG: 1, INFO: 2, WARN: 3, ERROR: 4 };

/** The first line of an error's message, escaped and cut to `max` characters. */
export function firstLine(error: unknown, max = 240): string {
  const message = error instanceof Error ? error.message : typeof error === 'string' ? error : JSON.stringify(error);
  const line = escapeControl((message ?? '').split('\n')[0] ?? '').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

function errorType(error: unknown): string | undefined {
  const type = (error as { type?: unknown } | undefined)?.type;
  if (typeof type === 'string' && type) return type;
  const name = (error as { name?: unknown } | undefined)?.name;
  return typeof name === 'string' && name !== 'Error' && name !== 'ApplicationFailure' ? name : undefined;
}

export interface OperatorLogOptions {
  readonly write: (line: string) => void;
  /** The workflow type whose executions are runs (default `agentRun`). */
  readonly workflowType?: string;
  /** Describes how a completed run ended (e.g. from its result); the line says `ended` without it. */
  readonly describeEnd?: (workflowId: string, runId: string | undefined) => Promise<string>;
  /** Clock for the line prefix (tests). */
  readonly now?: () => Date;
}

/** A Temporal `Logger` for `durable-harness dev` and `worker`. */
export class OperatorLog implements Logger {
  private readonly workflowType: string;

  constructor(private readonly options: OperatorLogOptions) {
    this.workflowType = options.workflowType ?? 'agentRun';
  }

  private line(text: string): void {
    const t = (this.options.now ?? (() => new Date()))();
    this.options.write(`${t.toISOString().slice(11, 19)} ${text}`);
  }

  log(level: LogLevel, message: string, meta: LogMetadata = {}): void {
    const workflowId = typeof meta.workflowId === 'string' ? escapeControl(meta.workflowId) : undefined;
    const isRun = meta.workflowType === this.workflowType;
    switch (message) {
      case 'Workflow started':
        if (isRun) this.line(`run ${workflowId} started`);
        return;
      case 'Workflow completed':
        if (!isRun) return;
        if (!this.options.describeEnd) return this.line(`run ${workflowId} ended`);
        void this.options.describeEnd(String(meta.workflowId), typeof meta.runId === 'string' ? meta.runId : undefined).then(
          (how) => this.line(`run ${workflowId} ${how}`),
          () => this.line(`run ${workflowId} ended`),
        );
        return;
      case 'No workflows registered, not polling for workflow tasks':
        // The host queue's worker runs activities only, by design: its start line says what it is.
        return;
      case 'Workflow completed as cancelled':
        if (isRun) this.line(`run ${workflowId} cancelled`);
        return;
      case 'Workflow continued as new':
        if (isRun) this.line(`run ${workflowId} continued as new`);
        return;
      case 'Workflow failed':
        if (isRun) this.line(`run ${workflowId} failed${errorType(meta.error) ? ` (${errorType(meta.error)})` : ''}: ${firstLine(meta.error)}`);
        return;
      case 'Activity failed': {
        if (rank[level] < rank.WARN) return;
        const step = typeof meta.activityType === 'string' ? meta.activityType : 'activity';
        const attempt = typeof meta.attempt === 'number' ? ` attempt ${meta.attempt}` : '';
        const type = errorType(meta.error);
        this.line(`run ${workflowId ?? '?'}: ${step}${attempt} failed${type ? ` (${type})` : ''}: ${firstLine(meta.error)}`);
        return;
      }
    }
    if (rank[level] < rank.WARN) return;
    const error = meta.error ? `: ${firstLine(meta.error)}` : '';
    this.line(`${level.toLowerCase()}: ${escapeControl(message)}${error}${workflowId ? ` (run ${workflowId})` : ''}`);
  }

  trace(message: string, meta?: LogMetadata): void {
    this.log('TRACE', message, meta);
  }
  debug(message: string, meta?: LogMetadata): void {
    this.log('DEBUG', message, meta);
  }
  info(message: string, meta?: LogMetadata): void {
    this.log('INFO', message, meta);
  }
  warn(message: string, meta?: LogMetadata): void {
    this.log('WARN', message, meta);
  }
  error(message: string, meta?: LogMetadata): void {
    this.log('ERROR', message, meta);
  }
}
