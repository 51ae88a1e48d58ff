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

/** Posture for tool use inside the sandbox. */
export type PermissionPosture = 'strict' | 'auto' | 'dangerous';

/** What became of a posture: enforced by the harness, or advisory with the reason why. */
export interface PermissionReport {
  readonly posture: PermissionPosture;
  readonly enforced: boolean;
  readonly note?: string;
}
