/**
 * The MCP loopback's vocabulary (docs/mcp.md): the read-only tools a harness reaches mid-turn through its run's egress
 * gateway, the resources an operator registers for it, and the audit row each read leaves in the ledger.
 */

/** The MCP server's name as every CLI is configured with it (its tools appear as `mcp__durable-harness__<tool>` in claude). */
export const LOOPBACK_SERVER_NAME = 'durable-harness';
/** The path the gateway serves the loopback on, on the sandbox's side of the door. */
export const LOOPBACK_PATH = '/.durable-harness/mcp';
/** The variable that carries the run's loopback token into the harness (never argv, never a config file's text). */
export const LOOPBACK_TOKEN_ENV = 'DURABLE_HARNESS_MCP_TOKEN';
/** The variable that carries the loopback's URL (for a harness that wires MCP itself). */
export const LOOPBACK_URL_ENV = 'DURABLE_HARNESS_MCP_URL';

/** The loopback's tools: each reads, none acts (acting stays in the turn-end envelope). */
export const LOOPBACK_TOOLS = ['run_status', 'list_steps', 'parent_steps', 'read_blob', 'list_resources', 'read_resource'] as const;
export type LoopbackTool = (typeof LOOPBACK_TOOLS)[number];

/** A resource the operator registers in the catalog (`agent.loopback.resources`): exact URIs only. */
export type HostResource =
  | { readonly uri: string; readonly description?: string; readonly mimeType?: string; readonly text: string }
  | { readonly uri: string; readonly description?: string; readonly mimeType?: string; readonly file: string }
  /** `uri` ends with `/`: every regular file under `root` is `<uri><relative path>` (no links followed, no `..`). */
  | { readonly uri: string; readonly description?: string; readonly mimeType?: string; readonly root: string }
  /**
   * One resource of another MCP server (streamable HTTP), read on the worker: `uri` maps to that server's
   * `mcp.uri` (default the same), and only the URIs declared so are ever asked for. `bearerEnv` names a variable of
   * the worker's environment holding its token (never the sandbox's).
   */
  | { readonly uri: string; readonly description?: string; readonly mimeType?: string; readonly mcp: { readonly url: string; readonly uri?: string; readonly bearerEnv?: string } };

/** The loopback's bounds, per call and per turn. */
export interface LoopbackLimits {
  /** Largest answer of one read (a resource, a blob, a page of steps). */
  readonly maxReadBytes: number;
  /** Reads (tool calls and resource reads) per turn; refused beyond. */
  readonly maxCallsPerTurn: number;
  /** Bytes answered per turn; refused beyond. */
  readonly maxBytesPerTurn: number;
  /** One read's deadline. */
  readonly callTimeoutMs: number;
  /** Largest JSON-RPC request body. */
  readonly maxRequestBytes: number;
}

export const DEFAULT_LOOPBACK_LIMITS: LoopbackLimits = {
  maxReadBytes: 256 * 1024,
  maxCallsPerTurn: 200,
  maxBytesPerTurn: 4 * 1024 * 1024,
  callTimeoutMs: 5_000,
  maxRequestBytes: 64 * 1024,
};

/** One read through the loopback: the audit row (never holds the token). */
export interface LoopbackRead {
  readonly at: number;
  /** `tools/call`, `resources/read`, or `auth` (a request refused before any method: no or another run's token). */
  readonly method: string;
  /** The tool's name, or the resource's URI (clipped). */
  readonly target: string;
  readonly status: 'ok' | 'refused' | 'error';
  /** Bytes answered. */
  readonly bytes: number;
  readonly durationMs: number;
  /** Why it was refused or failed. */
  readonly reason?: string;
  /** Refused reads not recorded one by one since the last row (over the per-turn row cap); absent = 0. */
  readonly suppressed?: number;
}
