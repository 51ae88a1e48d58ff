/** The words of a harness turn: capabilities, postures, usage and the event stream (the driver contract is driver.ts). */
import type { PermissionAnswer, PermissionPosture, PermissionReport, PermissionRequest } from '../contracts/permissions.js';
import type { Usage } from '../contracts/usage.js';

export type { PermissionPosture, PermissionReport, Usage };

/**
 * What an adapter ACTUALLY implements; the runtime emulates what is missing. Only flags the runtime decides on are
 * here (`structuredOutput`, `usageReporting` and `modelSelection` were never read and were removed).
 */
export interface Capabilities {
  /** Can continue a session natively; if false the workflow replays the conversation each turn. */
  readonly sessionResume: boolean;
  /**
   * Can branch a session into a new one (the CLI's own fork). Resumed turns then fork the session they continue,
   * so a retried attempt starts again from the state before the failed one instead of feeding the prompt twice.
   * Absent = false: a retry resumes the session as the failed attempt left it.
   */
  readonly sessionFork?: boolean;
  /** Can ask before a tool runs (a two-way mode proven against the real binary); if false `strict` is refused or flagged. */
  readonly permissionHooks: boolean;
  /** Accepts a system prompt; if false the contract rides in the turn input. */
  readonly systemPrompt: boolean;
  /**
   * Takes the run's MCP loopback (docs/mcp.md): its driver configures the CLI with it, and a test with the real binary
   * proves the CLI listed and called the loopback's tools. Absent = false: the loopback's URL and token are still in
   * the environment (`DURABLE_HARNESS_MCP_URL`, `DURABLE_HARNESS_MCP_TOKEN`) for a harness that wires MCP itself.
   */
  readonly mcpClient?: boolean;
}

/**
 * Small state an adapter keeps between the turns of a run, held by the runtime (the ledger) and never in the
 * workspace, where the harness could rewrite it. Values are JSON.
 */
export interface HarnessStateStore {
  get(key: string): Promise<unknown>;
  set(key: string, value: unknown): Promise<void>;
}

/**
 * An abort reason for the turn's signal (`EngineOptions.signal`) that ends the harness without the kill grace: the turn's budget is spent,
 * and a harness that ignores SIGTERM must not get another second of model calls.
 */
export class StopAtOnce extends Error {
  override readonly name = 'StopAtOnce';
}

/** What can go wrong in a turn, for the runtime to branch on. */
export type SessionErrorCode =
  | 'process-exit' // exited without a terminal event
  | 'timeout' // exceeded the turn timeout
  | 'cancelled' // the caller aborted the turn
  | 'resume-failed' // the harness no longer knows the session
  | 'vendor-error' // the model vendor refused or failed
  | 'protocol-error'; // the harness printed something its adapter cannot accept

/** One event of a streamed turn (a discriminated union). */
export type HarnessEvent =
  /** Assistant text as it arrives. */
  | { readonly type: 'text'; readonly text: string }
  /** What the harness is doing (tool use, file reads), for progress only. */
  | { readonly type: 'activity'; readonly description: string }
  /** The harness asks permission for a tool use; decided by the turn's gate. */
  | ({ readonly type: 'permission-request' } & PermissionRequest)
  /** What became of a permission request, and who decided. */
  | {
      readonly type: 'permission-decision';
      readonly id: string;
      readonly tool: string;
      readonly decision: PermissionAnswer['decision'];
      readonly decidedBy: string;
      readonly approvalId?: string;
      /** The harness got an edited input (natively, or told to ask again with it). */
      readonly edited: boolean;
      readonly message?: string;
    }
  /**
   * Usage of one model call, or of the calls since the last usage event (incremental: the fold adds them up),
   * and the harness's own cost for them when it gives one. An all-`undefined` usage says "tokens were spent and
   * the harness did not say how many".
   */
  | {
      readonly type: 'usage';
      readonly usage: Usage;
      readonly costUsd?: number;
      /** The harness's own number for this call within its attempt (stdio-JSON `call`), used as the ledger's. */
      readonly call?: number;
      /**
       * A call of an EARLIER attempt whose usage the runtime never acknowledged (its worker died before recording
       * it), re-reported by the harness's next process: recorded under that attempt, at most once.
       */
      readonly recovered?: { readonly attemptId: string; readonly turn: number; readonly call: number };
    }
  /** The harness's session identity, whether it resumed, and the model it says it used. */
  | { readonly type: 'session'; readonly sessionId: string; readonly resumed?: boolean; readonly model?: string }
  /** Terminal: the turn ended; `text` holds the raw envelope text. */
  | { readonly type: 'turn-complete'; readonly text: string; readonly session?: TurnSession }
  /** Terminal: the turn failed. */
  | {
      readonly type: 'session-error';
      readonly code: SessionErrorCode;
      readonly message: string;
      readonly exitCode?: number | null;
      readonly stderrTail?: string;
      readonly session?: TurnSession;
    }
  /** A line the adapter does not know; ignored by the runtime. */
  | { readonly type: 'unknown'; readonly raw: string }
  /** A stdout line over its cap (`bytes` > `limit`): streamed past and never read; `opening` is its first bytes. */
  | { readonly type: 'line-too-large'; readonly bytes: number; readonly limit: number; readonly opening: string }
  /**
   * Once per turn, before its terminal event, when lines were not reported one by one: unknown lines and oversized
   * lines past the per-turn sample are only counted (`…Lines` all of them, `…Reported` those reported as events).
   */
  | { readonly type: 'output-sampled'; readonly unknownLines: number; readonly unknownReported: number; readonly tooLargeLines: number; readonly tooLargeReported: number };

/** What the turn engine adds to the terminal event: the session the turn ran in, as the harness reported it. */
export interface TurnSession {
  readonly sessionId: string;
  /** The turn really continued the session it was asked to resume (a fork's branch counts). */
  readonly resumed: boolean;
  /** The model the harness says it used. */
  readonly model?: string;
}

export type TerminalEvent = Extract<HarnessEvent, { type: 'turn-complete' | 'session-error' }>;
