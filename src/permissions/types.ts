/**
 * One permission vocabulary for every harness: what a CLI asks before a tool runs, and the answer it gets.
 * Adapters map their CLI's own request (claude's `can_use_tool`, codex's `requestApproval`, ACP's
 * `session/request_permission`, pi's extension dialog, stdio-JSON's `permission` line) onto `PermissionRequest`,
 * and `PermissionAnswer` back onto the CLI's reply.
 */

/** What a tool use does, as far as a policy cares. */
export type PermissionKind = 'command' | 'edit' | 'read' | 'other';

/** How long an `allow` holds: this request only, or the same tool for the rest of the run. */
export type PermissionScope = 'once' | 'session';

/** How a CLI can carry an edited input: in its own protocol, only by the runtime's emulation, or not at all. */
export type EditSupport = 'native' | 'emulated';

/** A harness asking to use a tool. */
export interface PermissionRequest {
  /** The CLI's own id for this request (routes the answer back); not stable across attempts. */
  readonly id: string;
  /** The CLI's tool name (`Bash`, `exec_command`, `run_shell_command`, `bash`, `write`, …). */
  readonly tool: string;
  readonly kind: PermissionKind;
  /** The tool's input as the CLI gave it (what an edit replaces). */
  readonly input: unknown;
  /** One line for humans: the command, or the file and what happens to it. */
  readonly title: string;
  /** The shell command, for `kind: "command"` (unwrapped from `bash -lc '…'` where the CLI wraps it). */
  readonly command?: string;
  /** Files the tool touches, as the CLI named them (absolute or workspace-relative). */
  readonly paths?: readonly string[];
  /** What this CLI's answer can carry. */
  readonly options: {
    /** An edited input: by the CLI itself, or emulated (deny, tell the model the edit, pre-approve exactly it). */
    readonly edit: EditSupport;
    /** A reason the model sees when denied, natively; otherwise the runtime sends it as a follow-up. */
    readonly denyMessage: boolean;
  };
}

/** The decision on one request. */
export interface PermissionAnswer {
  readonly decision: 'allow' | 'deny';
  readonly scope: PermissionScope;
  /** Replaces the tool's input (allow only). */
  readonly editedInput?: unknown;
  /** Why, shown to the harness when denied. */
  readonly message?: string;
  /** Who or what decided: `policy:deny[0]`, `builtin:read-in-workspace`, `grant:session`, `operator:NAME`, `timeout`, … */
  readonly decidedBy: string;
  /** The durable id of the request in the run (the ledger's approval row), for operators and events. */
  readonly approvalId?: string;
}

/** Decides permission requests for one turn: the policy first, then a human through the approval broker. */
export interface PermissionGate {
  /**
   * Whether anything can be denied or asked under this policy. Adapters with a two-way mode use it only then;
   * otherwise they keep their one-way JSON mode (nothing to ask).
   */
  readonly interactive: boolean;
  /** Decides; never throws for a policy or broker failure (fails closed: deny). Rejects only when `signal` aborts. */
  decide(request: PermissionRequest, signal?: AbortSignal): Promise<PermissionAnswer>;
}

/** A request the policy left open, as the broker stores it. */
export interface PendingApproval {
  readonly workflowId: string;
  /** The ledger run; absent = the latest run of `workflowId`. */
  readonly runId?: string;
  /** Durable id within the run: the same request asked again (a retried attempt) gets the same id. */
  readonly requestId: string;
  readonly turn: number;
  readonly tool: string;
  readonly kind: PermissionKind;
  readonly title: string;
  readonly input: unknown;
  readonly command?: string;
  readonly paths?: readonly string[];
  /** Give up and deny this long after the request was FIRST made (not per attempt). */
  readonly timeoutMs: number;
}

/** The human side: what the turn activity awaits for a request the policy left open. */
export interface ApprovalBroker {
  /** Resolves with the decision; a timeout resolves as a denial. Rejects when `signal` aborts. */
  ask(request: PendingApproval, signal?: AbortSignal): Promise<PermissionAnswer>;
}
