/**
 * The harness driver contract (v2): a driver is a small record, not a subclass. ONE turn engine (engine.ts) runs
 * every driver — spawn through the sandbox, line framing and its caps, the turn timeout and its pause during a
 * permission wait, stop, drain after kill, and exactly one terminal event, last. A driver says only how its CLI is
 * set up (`prepare`), started (`command`) and talked to (`session`): a line mapper for one-way CLIs, a top-down
 * `async` conversation for two-way protocols.
 *
 * Nothing here is stateful across turns: what a turn learns (session id, model, whether it resumed) arrives in its
 * terminal event; what a driver must keep between turns goes to `turn.state` (the run's ledger).
 */
import type { PermissionAnswer, PermissionRequest } from '../permissions/types.js';
import type { LineLimits, OversizedLine } from '../sandbox/line-queue.js';
import type { SandboxFs } from '../sandbox/types.js';
import type { Capabilities, HarnessEvent, HarnessStateStore, PermissionPosture, PermissionReport, TerminalEvent } from './types.js';

/** A harness driver: the whole surface a harness author implements. */
export interface HarnessDriver {
  readonly specificationVersion: 'v2';
  /** The name catalogs use (`driverClass`). */
  readonly driverClass: string;
  /** What the driver really implements; the runtime emulates the rest. */
  readonly capabilities: Capabilities;
  /** How the CLI reaches its model vendor: declared for the egress gateway (not read by the engine yet). */
  readonly vendor: VendorWiring;
  /** How the CLI takes MCP servers, `undefined` when it takes none: declared for MCP wiring (not read yet). */
  readonly mcp: McpWiring | undefined;
  /** What a posture becomes on this CLI. Pure: called to report the posture, before any turn. */
  permissions(posture: PermissionPosture): PermissionReport;
  /**
   * What the CLI computes on its first run in an empty home, done once per worker and version and copied into new
   * homes (home-template.ts); absent: every fresh home does its own first run.
   */
  readonly homeTemplate?: HomeTemplateSpec;
  /** Writes the CLI's home and config for this turn through the sandbox's files (paths relative to the workspace). */
  prepare?(home: SandboxFs, turn: DriverTurn): Promise<void>;
  /** How this turn's process starts. */
  command(turn: DriverTurn): DriverCommand;
  /** How the process is talked to this turn: one-way lines, or a two-way conversation (only when `turn.twoWay`). */
  session(turn: DriverTurn): OneWaySession | TwoWaySession;
}

/** How a CLI's first run is done once, with no vendor, and what of the home it leaves is a template's. */
export interface HomeTemplateSpec {
  /** The home's directory below `.home` (as `driverHome`). */
  readonly dir: string;
  /**
   * The first run in `home` (a host path) with its model at `baseUrl`, which drops every connection: the arguments
   * after the executable and its base arguments, its environment (no credential), and files to write in `home` first.
   */
  prime(options: { readonly home: string; readonly baseUrl: string }): {
    readonly args: readonly string[];
    readonly env: Readonly<Record<string, string>>;
    readonly files: Readonly<Record<string, string>>;
  };
  /**
   * Top-level entries never copied: a run's own (config, sessions, identity, locks), and what the CLI makes again
   * faster than a copy through the sandbox's files.
   */
  readonly leave: readonly string[];
  /** Top-level directories copied empty (scratch). */
  readonly empty: readonly string[];
  /** SQLite tables (in `*.sqlite` files) that keep their rows (migration records); every other table is emptied. */
  readonly keepTables: readonly string[];
}

/** Everything a driver knows about one turn; no secrets other than `env`. */
export interface DriverTurn {
  readonly runId: string;
  /** The harness's own name in the catalog (for messages). */
  readonly harnessName: string;
  readonly executable: string;
  readonly baseArgs: readonly string[];
  readonly model?: string;
  /** The workspace as the harness sees it (inside the sandbox); homes live below it, in `.home/<driver>`. */
  readonly workspacePath: string;
  /** Environment for the harness process: credentials and non-secret settings. */
  readonly env: Readonly<Record<string, string>>;
  /** Extra, driver-specific settings from the catalog. */
  readonly settings: Readonly<Record<string, unknown>>;
  /** Vendor base URL override. */
  readonly baseUrl?: string;
  /**
   * The run's MCP loopback (docs/mcp.md), when its agent has it: the CLI is configured with one streamable-HTTP MCP
   * server `name` at `url`, its bearer token in the variable `tokenEnv` (config names the variable, never the token).
   */
  readonly mcp?: { readonly name: string; readonly url: string; readonly tokenEnv: string };
  /** The harness's reply cap (catalog `maxReplyBytes`): a terminal line may be twice as long. */
  readonly maxReplyBytes?: number;
  /** The turn's timeout; a command may shorten it (`DriverCommand.timeoutMs`). */
  readonly timeoutMs: number;
  /** The text to send: the task, formatted step results, or a replayed conversation. */
  readonly prompt: string;
  /** 1-based turn number within the run. */
  readonly turn: number;
  /** The ledger id of this attempt, for harnesses that acknowledge usage (stdio-JSON `usage-ack`). */
  readonly attemptId?: string;
  /** The runtime's system prompt (the envelope contract), when the harness takes one. */
  readonly systemPrompt?: string;
  readonly posture: PermissionPosture;
  /** Session to continue. */
  readonly resumeSessionId?: string;
  /**
   * Continue `resumeSessionId` in a NEW session branched from it (the CLI's fork), leaving it untouched: a retried
   * attempt then forks the same state again instead of resuming what the failed attempt appended.
   */
  readonly fork: boolean;
  /** The turn has an interactive permission gate and the driver can ask: use the two-way mode. */
  readonly twoWay: boolean;
  /** The run's driver state between turns, held by the runtime (the ledger), never in the workspace. */
  readonly state: HarnessStateStore;
  /**
   * Transition only: the workspace on the worker's host, where the drivers still READ the stores their CLIs keep
   * (codex rollouts, gemini chat files, the opencode database) until `SandboxFs` has ranged reads and renames.
   * Homes are written through `prepare`'s sandbox files.
   */
  readonly hostWorkspacePath?: string;
}

/** How one turn's process is started. */
export interface DriverCommand {
  readonly argv: readonly string[];
  /** Added to the turn's env. */
  readonly env?: Readonly<Record<string, string>>;
  /** Written to stdin; stdin is ignored when both this and `keepStdinOpen` are absent. */
  readonly stdin?: string;
  /** Keep stdin open after `stdin` (two-way protocols, permission answers, usage acks). */
  readonly keepStdinOpen?: boolean;
  /** How long stdout lines may grow; default: every line up to twice the reply cap. */
  readonly lineLimits?: LineLimits;
  /** A shorter turn timeout than the catalog's, for a CLI that would otherwise retry for ever. */
  readonly timeoutMs?: number;
}

/** A one-way session: the engine reads lines and hands each to the mapper `start` made for this turn. */
export interface OneWaySession {
  readonly kind: 'one-way';
  /** A mapper for this turn: its state lives in its closure. */
  start(turn: DriverTurn, io: LineIo): LineMapper | Promise<LineMapper>;
}

/** What a line mapper may do besides mapping: answer on stdin, read the harness's own files. */
export interface LineIo {
  /** Writes one line (a newline is added) to the process's stdin. */
  send(line: string): void;
  /** The workspace's files (the harness's home included), as the sandbox sees them. */
  readonly fs: SandboxFs;
  /** As `SessionIo.followUp`: for a line-mapped protocol that can send another prompt. */
  followUp(): string | undefined;
}

/** The events of one line: none, one, or several. */
export type Mapped = HarnessEvent | readonly HarnessEvent[] | undefined;

/** Maps one turn's stdout lines to events. Only `line` is required; a mapper that throws makes the line `unknown`. */
export interface LineMapper {
  /** One stdout line (never empty). A terminal event ends the turn; anything after it is dropped. */
  line(line: string): Mapped | Promise<Mapped>;
  /** A line over its cap (never read). Default: one `line-too-large` event. */
  oversized?(line: OversizedLine): readonly HarnessEvent[];
  /** Writes the gate's answer to a `permission-request` this mapper returned, in the CLI's protocol. */
  answer?(request: PermissionRequest, answer: WireAnswer): void;
  /**
   * The terminal event when the process exits without one; `undefined` for the engine's (a missing executable, an
   * exit code and stderr). Where a driver says "the CLI no longer knows the session" (see `resumeFailed`).
   */
  exit?(code: number | null, stderrTail: string): TerminalEvent | undefined;
  /**
   * Usage of model calls made (or started) but never reported, when the turn ends early — killed, cancelled, timed
   * out, or exited without its terminal line. Only usage events count.
   */
  unreported?(): readonly HarnessEvent[] | Promise<readonly HarnessEvent[]>;
  /** At a permission request: whether a model call's usage is still to come (the CLI reports it after the answer). */
  callOpen?(): boolean;
  /** The stdin line that tells the harness a usage event is durable (stdio-JSON `usage-ack`); `undefined` = none. */
  usageAck?(ack: UsageAck): string | undefined;
}

/** A two-way session: a top-down conversation over the process's stdio. */
export interface TwoWaySession {
  readonly kind: 'two-way';
  /**
   * Runs the turn's conversation: the terminal event, or `undefined` when the output ended first (the engine then
   * explains the exit). Once `io.signal` aborts, only usage and session events are still taken.
   */
  run(turn: DriverTurn, io: SessionIo): Promise<TerminalEvent | undefined>;
  /** As `LineMapper.exit`: the terminal event for an exit without one. */
  exit?(turn: DriverTurn, code: number | null, stderrTail: string): TerminalEvent | undefined;
}

/** What a two-way session talks through. */
export interface SessionIo {
  /** The process's stdout lines (oversized ones are reported by the engine and never appear here). */
  readonly lines: AsyncIterable<string>;
  /** Writes one line (a newline is added) to the process's stdin. */
  send(line: string): void;
  /** Reports an event (not a terminal one: `run` returns that; not a permission request: `gate` reports it). */
  emit(event: HarnessEvent): void;
  /**
   * Reports the request, waits for the turn's gate with the turn clock paused, reports the decision and returns the
   * answer as the CLI's protocol takes it. `callOpen`: a model call's usage is still to come. A turn stopped (or a
   * process gone) during the wait is answered with a denial; the tool never runs.
   */
  gate(request: PermissionRequest, options?: { readonly callOpen?: boolean }): Promise<WireAnswer>;
  /**
   * The follow-up prompt that tells the model what its protocol could not (a denial's reason, an edit to ask again
   * with), or `undefined` when there is none or the turn had its share. Consumes what it says.
   */
  followUp(): string | undefined;
  /** The workspace's files (the harness's home included), as the sandbox sees them. */
  readonly fs: SandboxFs;
  /** Aborts when the turn is stopped (timeout, cancel, budget): the process is being killed. */
  readonly signal: AbortSignal;
}

/** The answer as the CLI's protocol gets it: an emulated edit arrives as a denial (the model is told in a follow-up). */
export interface WireAnswer {
  readonly allow: boolean;
  readonly message?: string;
  /** Only when the CLI takes edits natively. */
  readonly editedInput?: unknown;
  readonly scope: PermissionAnswer['scope'];
}

/** A usage event is durable in the ledger. */
export interface UsageAck {
  readonly attemptId: string;
  readonly call: number;
}

/** The vendor API a CLI speaks. */
export type VendorApi = 'anthropic-messages' | 'openai-responses' | 'openai-chat' | 'gemini' | 'any';

/** Where a CLI takes a value: an environment variable, or a key in a config file it reads (`file:key`). */
export type WiringSource = { readonly env: string } | { readonly config: string };

/** How a CLI reaches its vendor: its API family, where it takes the base URL and the key. */
export interface VendorWiring {
  readonly api: VendorApi;
  readonly baseUrl: WiringSource;
  readonly apiKey: WiringSource;
}

/** How a CLI takes MCP servers: a flag, a config file (`file:key`), or the ACP session's `mcpServers`. */
export type McpWiring = { readonly flag: string } | { readonly config: string } | { readonly acpSession: true };
