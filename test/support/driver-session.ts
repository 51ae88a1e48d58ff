/**
 * For tests that drive several turns of one harness: the turns of a driver over the one engine, remembering what a
 * caller (the activity) would carry from turn to turn — the session to resume, its posture and system prompt, and
 * the run's driver state.
 */
import { runDriverTurn, type DriverRun } from '../../src/adapters/engine.js';
import type { HarnessDriver, UsageAck } from '../../src/adapters/driver.js';
import type { HarnessEvent, HarnessStateStore, PermissionPosture, PermissionReport } from '../../src/adapters/types.js';
import type { PermissionGate } from '../../src/permissions/types.js';
import { LocalWorkspaceFs } from '../../src/sandbox/workspace-fs.js';
import type { SandboxExecutor, SandboxFs } from '../../src/sandbox/types.js';

/** What the session's turns run with. */
export interface HarnessSessionConfig {
  readonly runId: string;
  readonly harnessName: string;
  readonly executable: string;
  readonly baseArgs: readonly string[];
  readonly model?: string;
  readonly workspacePath: string;
  readonly hostWorkspacePath: string;
  readonly env: Readonly<Record<string, string>>;
  readonly executor: SandboxExecutor;
  /** Default: the host workspace's files. */
  readonly fs?: SandboxFs;
  readonly resumeSessionId?: string;
  readonly baseUrl?: string;
  readonly turnTimeoutMs: number;
  readonly maxReplyBytes?: number;
  readonly settings?: Readonly<Record<string, unknown>>;
  readonly state?: HarnessStateStore;
}

/** One turn's input. */
export interface TurnInput {
  readonly prompt: string;
  readonly turn: number;
  readonly attemptId?: string;
  readonly signal?: AbortSignal;
  readonly gate?: PermissionGate;
}

export interface DriverSession {
  readonly driverClass: string;
  readonly capabilities: HarnessDriver['capabilities'];
  applyPermissionPolicy(posture: PermissionPosture): PermissionReport;
  setSystemPrompt(text: string): void;
  start(config: HarnessSessionConfig): Promise<void>;
  runTurn(input: TurnInput): AsyncIterable<HarnessEvent>;
  acknowledgeUsage(ack: UsageAck): Promise<void>;
  readonly resumed: boolean;
  readonly reportedModel: string | undefined;
  readonly externalSessionId: string | undefined;
  end(): Promise<void>;
}

function memoryState(): HarnessStateStore {
  const values = new Map<string, unknown>();
  return { get: async (key) => values.get(key), set: async (key, value) => void values.set(key, value) };
}

/** Turns of `driver`, one after the other, in one session. */
export function driverSession(driver: HarnessDriver, options: { exitGraceMs?: number; outputClosedGraceMs?: number } = {}): DriverSession {
  let config: HarnessSessionConfig | undefined;
  let state: HarnessStateStore = memoryState();
  let posture: PermissionPosture = 'auto';
  let systemPrompt: string | undefined;
  let sessionId: string | undefined;
  let resumed = false;
  let model: string | undefined;
  let current: DriverRun | undefined;
  async function* turn(input: TurnInput): AsyncGenerator<HarnessEvent> {
    if (!config) throw new Error('start first');
    const c = config;
    resumed = false;
    model = undefined;
    const run = runDriverTurn(
      driver,
      {
        runId: c.runId,
        harnessName: c.harnessName,
        executable: c.executable,
        baseArgs: c.baseArgs,
        ...(c.model !== undefined ? { model: c.model } : {}),
        workspacePath: c.workspacePath,
        hostWorkspacePath: c.hostWorkspacePath,
        env: c.env,
        settings: c.settings ?? {},
        ...(c.baseUrl !== undefined ? { baseUrl: c.baseUrl } : {}),
        ...(c.maxReplyBytes !== undefined ? { maxReplyBytes: c.maxReplyBytes } : {}),
        timeoutMs: c.turnTimeoutMs,
        prompt: input.prompt,
        turn: input.turn,
        ...(input.attemptId !== undefined ? { attemptId: input.attemptId } : {}),
        ...(systemPrompt !== undefined ? { systemPrompt } : {}),
        posture,
        ...(sessionId !== undefined ? { resumeSessionId: sessionId } : {}),
        state,
      },
      { executor: c.executor, fs: c.fs ?? new LocalWorkspaceFs(c.hostWorkspacePath), ...(input.gate ? { gate: input.gate } : {}), ...(input.signal ? { signal: input.signal } : {}), ...options },
    );
    current = run;
    try {
      for await (const event of run) {
        if (event.type === 'turn-complete' || event.type === 'session-error') {
          if (event.session) {
            sessionId = event.session.sessionId;
            resumed = event.session.resumed;
            model = event.session.model;
          }
          // A session the harness no longer knows is never resumed again.
          if (event.type === 'session-error' && event.code === 'resume-failed') sessionId = undefined;
        }
        yield event;
      }
    } finally {
      current = undefined;
    }
  }
  return {
    driverClass: driver.driverClass,
    capabilities: driver.capabilities,
    applyPermissionPolicy: (p) => {
      posture = p;
      return driver.permissions(p);
    },
    setSystemPrompt: (text) => {
      systemPrompt = text;
    },
    start: async (c) => {
      config = c;
      state = c.state ?? state;
      sessionId = c.resumeSessionId;
    },
    runTurn: (input) => turn(input),
    acknowledgeUsage: async (ack) => current?.acknowledge(ack),
    get resumed() {
      return resumed;
    },
    get reportedModel() {
      return model;
    },
    get externalSessionId() {
      return sessionId;
    },
    end: async () => undefined,
  };
}
