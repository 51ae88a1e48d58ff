/**
 * The run's door: its egress gateway (src/gateway) as the turn activity uses it. One gateway per run lives in the
 * worker that holds the run's sandbox, on the Unix socket the sandbox provider made for it (`SandboxRef.gateway`);
 * it is opened by the run's first turn on this worker (again after a worker restart, with a new placeholder) and
 * closed by `endSession`. Between turns it refuses every model call: only a running turn spends.
 *
 * What it records — every request, every metered model call — goes to the ledger in batches, each row with the
 * turn and attempt it happened in; a retried write inserts nothing twice (row ids are the gateway's own).
 */
import { randomBytes } from 'node:crypto';
import type { HarnessDriver } from '../../adapters/driver.js';
import { priceUsage } from '../../contracts/cost.js';
import type { ModelCall, NetworkRecord, VendorApi } from '../../contracts/network.js';
import type { TurnBudget } from '../../contracts/run.js';
import { addUsage, noUsage, totalTokens, type Usage } from '../../contracts/usage.js';
import { LOOPBACK_PATH, LOOPBACK_TOKEN_ENV, LOOPBACK_URL_ENV, type LoopbackRead } from '../../contracts/loopback.js';
import { createLoopback, openGateway, type Gateway, type Loopback, type LoopbackData } from '../../gateway/index.js';
import type { Ledger, LoopbackRow, ModelCallRow, NetworkRow, RunStepRecord } from '../../ledger/types.js';
import type { SandboxRef } from '../../sandbox/types.js';
import type { FrozenSpec } from '../../spec/index.js';
import type { BudgetCrossing } from './accounting.js';

/** Where each vendor API is when the catalog names no `baseUrl`. */
const defaultUpstreams: Partial<Record<VendorApi, string>> = {
  'anthropic-messages': 'https://api.anthropic.com',
  'openai-responses': 'https://api.openai.com/v1',
  'openai-chat': 'https://api.openai.com/v1',
  gemini: 'https://generativelanguage.googleapis.com',
};

/** The real vendor a harness's model calls go to, or `undefined` when the runtime cannot know it (API `any`, no baseUrl). */
export function upstreamOf(spec: { readonly harness: { readonly baseUrl?: string | undefined } }, driver: Pick<HarnessDriver, 'vendor'>): string | undefined {
  return spec.harness.baseUrl ?? defaultUpstreams[driver.vendor.api];
}

/** The environment variables that may carry the vendor key into the harness: the catalog's and the driver's. */
export function keyVariablesOf(spec: Pick<FrozenSpec, 'harness'>, driver: Pick<HarnessDriver, 'vendor'>): string[] {
  const fromSettings = spec.harness.settings?.apiKeyEnv;
  return [
    ...new Set(
      [spec.harness.apiKeyEnv, typeof fromSettings === 'string' ? fromSettings : undefined, 'env' in driver.vendor.apiKey ? driver.vendor.apiKey.env : undefined].filter(
        (v): v is string => v !== undefined,
      ),
    ),
  ];
}

/** What one turn metered on the wire. */
export interface MeteredTurn {
  readonly calls: number;
  readonly usage: Usage;
  /** Served models, in order of first appearance. */
  readonly models: readonly string[];
  readonly refused: number;
  /** Reads through the MCP loopback this turn (refused ones included). */
  readonly loopbackReads: number;
}

interface TurnContext {
  readonly turn: number;
  attemptId: string;
  readonly budget: TurnBudget | undefined;
  readonly prices: FrozenSpec['harness']['prices'];
  /** Spend counted against the budget before this turn's calls (earlier attempts of the turn: the budget says). */
  calls: number;
  usage: Usage;
  models: string[];
  refused: number;
  /** Told once when the gateway closes the door on the budget: the turn is over. */
  readonly onSpent?: (crossing: BudgetCrossing) => void;
  spentTold?: boolean;
}

/** A page of steps after `after`, as the loopback answers them. */
function page(steps: readonly RunStepRecord[], after: number, limit: number) {
  return steps.filter((s) => s.seq > after).slice(0, limit).map((s) => ({ seq: s.seq, turn: s.turn, type: s.type, payload: s.payload }));
}

/** Rows held for the ledger at most: a ledger that is down for long loses the oldest (counted in the next row). */
const maxPendingRows = 5_000;

/** One run's gateway and its bookkeeping. */
export class RunDoor {
  private readonly instance = randomBytes(6).toString('hex');
  private counter = 0;
  private network: NetworkRow[] = [];
  private models: ModelCallRow[] = [];
  private reads: LoopbackRow[] = [];
  private parent: Promise<string | undefined> | undefined;
  private dropped = 0;
  private current: TurnContext | undefined;
  private flushing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  gateway!: Gateway;
  /** The run's MCP loopback, when its agent has it on; its token is the harness's `DURABLE_HARNESS_MCP_TOKEN`. */
  loopback: { readonly server: Loopback; readonly token: string } | undefined;

  constructor(
    readonly workflowId: string,
    readonly runId: string,
    /** Identifies what the gateway was opened with: another key or upstream reopens it. */
    readonly fingerprint: string,
    private readonly ledger: Ledger,
  ) {}

  /** Told whether the ledger takes the rows (the running turn's progress says "waiting for the ledger"). */
  private onLedgerFault: (err: Error | undefined) => void = () => undefined;

  /** The placeholder the harness gets instead of its key. */
  get placeholder(): string {
    return this.gateway.placeholder;
  }

  /** The turn that may spend now (its attempt id for the rows), with the run's budget left. */
  beginTurn(
    turn: {
      readonly turn: number;
      readonly attemptId: string;
      readonly budget: TurnBudget | undefined;
      readonly prices: FrozenSpec['harness']['prices'];
      readonly onSpent?: (crossing: BudgetCrossing) => void;
    },
    onLedgerFault: (err: Error | undefined) => void,
  ): void {
    this.current = { ...turn, calls: 0, usage: noUsage, models: [], refused: 0 };
    this.onLedgerFault = onLedgerFault;
    this.loopback?.server.beginTurn();
  }

  /** A fresh session within the same attempt: its rows belong to its own attempt id. */
  setAttempt(attemptId: string): void {
    if (this.current) this.current.attemptId = attemptId;
  }

  /** What this turn metered so far. */
  metered(): MeteredTurn {
    const c = this.current;
    const loopbackReads = c ? (this.loopback?.server.counts().calls ?? 0) : 0;
    return c ? { calls: c.calls, usage: c.usage, models: [...c.models], refused: c.refused, loopbackReads } : { calls: 0, usage: noUsage, models: [], refused: 0, loopbackReads };
  }

  /** Ends the turn: model calls are refused until the next; every row is written (or given up to the log). */
  async endTurn(): Promise<MeteredTurn> {
    const metered = this.metered();
    this.current = undefined;
    await this.flush();
    return metered;
  }

  /** Why the loopback refuses reads now (no turn of this run is running), or `undefined`. */
  closedReason(): string | undefined {
    return this.current ? undefined : 'no turn of this run is running: the loopback reads only during a turn';
  }

  /** Before each model call: why it is refused (no turn running, the run's budget spent), or `undefined`. */
  admit = (): string | undefined => {
    const c = this.current;
    if (!c) return 'no turn of this run is running';
    const crossing = this.crossingOf(c);
    if (crossing && !c.spentTold) {
      // A refused model call ends the turn as a spent budget: a CLI told "403" may retry, or go on without its model.
      c.spentTold = true;
      c.onSpent?.(crossing);
    }
    return crossing?.reason;
  };

  private crossingOf(c: TurnContext): BudgetCrossing | undefined {
    const tokens = totalTokens(c.usage);
    if (c.budget?.tokens !== undefined && tokens >= c.budget.tokens) {
      return { guardrail: 'tokens', reason: `the run's token budget is spent (${tokens.toLocaleString('en-US')} tokens metered this turn, ${c.budget.tokens.toLocaleString('en-US')} were left)` };
    }
    const cost = c.prices ? priceUsage(c.prices, c.usage) : undefined;
    if (c.budget?.costUsd !== undefined && cost !== undefined && cost >= c.budget.costUsd) {
      return { guardrail: 'cost', reason: `the run's cost budget is spent ($${cost.toFixed(4)} metered this turn, $${c.budget.costUsd.toFixed(4)} were left)` };
    }
    return undefined;
  }

  onRecord = (record: NetworkRecord): void => {
    if (record.decision === 'refused' && this.current) this.current.refused += 1;
    const suppressed = (record.suppressed ?? 0) + this.takeDropped();
    this.push(this.network, { ...this.base(), record: suppressed > 0 ? { ...record, suppressed } : record });
  };

  onModelCall = (call: ModelCall): void => {
    const c = this.current;
    if (c) {
      c.calls += 1;
      c.usage = addUsage(c.usage, call.usage);
      if (call.model !== undefined && !c.models.includes(call.model)) c.models.push(call.model);
    }
    this.push(this.models, { ...this.base(), call });
  };

  onLoopbackRead = (read: LoopbackRead): void => {
    this.push(this.reads, { ...this.base(), read });
  };

  /** The run's data as the loopback reads it: the turn's budget from the activity, the steps and blobs from the ledger. */
  loopbackData(): LoopbackData {
    const steps = () => this.ledger.listSteps(this.workflowId, this.runId);
    return {
      status: async () => {
        const c = this.current;
        return {
          workflowId: this.workflowId,
          status: c ? 'running' : 'between turns',
          turn: c?.turn,
          budgetLeft: c?.budget ? { ...(c.budget.tokens !== undefined ? { tokens: c.budget.tokens - totalTokens(c.usage) } : {}), ...(c.budget.costUsd !== undefined ? { costUsd: c.budget.costUsd - ((c.prices ? priceUsage(c.prices, c.usage) : undefined) ?? 0) } : {}) } : 'unbounded',
          thisTurn: c ? { modelCalls: c.calls, tokens: totalTokens(c.usage) } : undefined,
        };
      },
      steps: async (after, limit) => page(await steps(), after, limit),
      parentSteps: async (after, limit) => {
        // A run's parent never changes: looked up once per door, not on every page.
        this.parent ??= this.ledger.getRun(this.workflowId, this.runId).then(
          (run) => run?.parentWorkflowId,
          (error: unknown) => {
            this.parent = undefined; // a ledger fault is asked again next time
            throw error;
          },
        );
        const parent = await this.parent;
        return parent === undefined ? undefined : page(await this.ledger.listSteps(parent), after, limit);
      },
      // Only a blob this run's steps name: blobs are content-addressed and shared, a hash alone is no grant.
      blob: async (hash) => ((await steps()).some((s) => JSON.stringify(s.payload).includes(`"blob":"${hash}"`)) ? this.ledger.getBlob(hash) : undefined),
    };
  }

  private base() {
    return { id: `${this.instance}:${++this.counter}`, workflowId: this.workflowId, runId: this.runId, turn: this.current?.turn ?? 0, ...(this.current ? { attemptId: this.current.attemptId } : {}) };
  }

  private takeDropped(): number {
    const n = this.dropped;
    this.dropped = 0;
    return n;
  }

  private push<T>(rows: T[], row: T): void {
    rows.push(row);
    if (this.network.length + this.models.length + this.reads.length > maxPendingRows) {
      // Only audit rows are given up (model calls are the bill): the count travels in the next record.
      if (this.network.shift() !== undefined) this.dropped += 1;
    }
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, 250).unref();
  }

  /** Writes what is pending; one write at a time; a failed write keeps its rows for the next. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.network.length === 0 && this.models.length === 0 && this.reads.length === 0) return;
    const network = this.network.splice(0);
    const models = this.models.splice(0);
    const reads = this.reads.splice(0);
    this.flushing = (async () => {
      try {
        if (models.length) await this.ledger.recordModelCalls(models);
        if (network.length) await this.ledger.recordNetwork(network);
        if (reads.length) await this.ledger.recordLoopbackReads(reads);
        this.onLedgerFault(undefined);
      } catch (err) {
        this.models.unshift(...models);
        this.network.unshift(...network);
        this.reads.unshift(...reads);
        this.onLedgerFault(err instanceof Error ? err : new Error(String(err)));
        this.timer ??= setTimeout(() => {
          this.timer = undefined;
          void this.flush();
        }, 1_000).unref();
      }
    })();
    try {
      await this.flushing;
    } finally {
      this.flushing = undefined;
    }
  }

  async close(): Promise<void> {
    this.current = undefined;
    await this.gateway.close();
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.flush().catch(() => undefined);
  }
}

/** What opening a run's door needs. */
export interface DoorRequest {
  readonly ref: SandboxRef;
  readonly workflowId: string;
  readonly runId: string;
  readonly spec: FrozenSpec;
  readonly driver: HarnessDriver;
  /** The run's resolved credentials (the vendor key among them). */
  readonly env: Readonly<Record<string, string>>;
  readonly ledger: Ledger;
  /** The worker's environment: where an upstream MCP resource's token (`mcp.bearerEnv`) is read. */
  readonly workerEnv?: Readonly<Record<string, string | undefined>>;
}

/** The worker's gateways, one per run socket. */
export class GatewayRegistry {
  private readonly doors = new Map<string, RunDoor>();
  private readonly opening = new Map<string, Promise<RunDoor>>();

  /** The run's door, opened now if this worker has none on its socket (or one opened for another run or key). */
  async open(request: DoorRequest): Promise<RunDoor | undefined> {
    const socket = request.ref.gateway?.socket;
    if (socket === undefined) return undefined;
    const pending = this.opening.get(socket);
    if (pending) await pending.catch(() => undefined);
    const { spec, driver } = request;
    const upstream = upstreamOf(spec, driver);
    const key = keyVariablesOf(spec, driver).map((v) => request.env[v]).find((v) => v !== undefined && v !== '');
    const fingerprint = JSON.stringify([request.workflowId, request.runId, upstream, driver.vendor.api, key, spec.agent.sandbox.allowlist ?? [], spec.agent.loopback ?? null]);
    const existing = this.doors.get(socket);
    if (existing?.fingerprint === fingerprint) return existing;
    const open = (async () => {
      // A sub-agent in its parent's sandbox takes the socket in turn with its parent: the other's gateway closes.
      if (existing) await existing.close();
      this.doors.delete(socket);
      const door = new RunDoor(request.workflowId, request.runId, fingerprint, request.ledger);
      const loopback = spec.agent.loopback;
      if (loopback) {
        // Minted with the door, forgotten when it closes (endSession): a token of another run or an ended one is refused.
        const token = `dh-mcp-${randomBytes(24).toString('base64url')}`;
        const server = createLoopback({
          token,
          data: door.loopbackData(),
          resources: loopback.resources,
          limits: loopback.limits,
          onRead: door.onLoopbackRead,
          closedReason: () => door.closedReason(),
          ...(request.workerEnv ? { workerEnv: (name: string) => request.workerEnv?.[name] } : {}),
        });
        door.loopback = { server, token };
      }
      door.gateway = await openGateway({
        ...(door.loopback ? { loopback: door.loopback.server } : {}),
        socketPath: socket,
        ...(upstream !== undefined ? { vendor: { api: driver.vendor.api, upstream, key } } : {}),
        allowlist: spec.agent.sandbox.networkPolicy === 'allowlist' ? (spec.agent.sandbox.allowlist ?? []) : [],
        onRecord: door.onRecord,
        onModelCall: door.onModelCall,
        admitModelCall: door.admit,
      });
      this.doors.set(socket, door);
      return door;
    })();
    this.opening.set(socket, open);
    try {
      return await open;
    } finally {
      this.opening.delete(socket);
    }
  }

  /** Closes the run's gateway (its placeholder is forgotten): `endSession`, on every exit path. Idempotent. */
  async closeRun(workflowId: string): Promise<void> {
    for (const [socket, door] of [...this.doors]) {
      if (door.workflowId !== workflowId) continue;
      this.doors.delete(socket);
      await door.close();
    }
  }

  /** Closes every gateway (worker shutdown). */
  async closeAll(): Promise<void> {
    const doors = [...this.doors.values()];
    this.doors.clear();
    await Promise.all(doors.map((d) => d.close().catch(() => undefined)));
  }
}

/**
 * The harness's environment and base URL behind the door: every variable that may carry the vendor key (and any
 * other holding the same value) gets the placeholder; the base URL is the sandbox side of the gateway; with an
 * allowlist, the proxy variables name the gateway (its credential is the placeholder too).
 */
export function behindDoor(
  door: RunDoor,
  port: number,
  spec: FrozenSpec,
  driver: HarnessDriver,
  env: Readonly<Record<string, string>>,
): { env: Record<string, string>; baseUrl: string | undefined; mcp?: { url: string; tokenEnv: string } } {
  const placeholder = door.placeholder;
  const keyVars = keyVariablesOf(spec, driver);
  const key = keyVars.map((v) => env[v]).find((v) => v !== undefined && v !== '');
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) out[name] = key !== undefined && value === key ? placeholder : value;
  for (const v of keyVars) out[v] = placeholder;
  if (spec.agent.sandbox.networkPolicy === 'allowlist') {
    const proxy = `http://dh:${placeholder}@127.0.0.1:${port}`;
    Object.assign(out, { HTTPS_PROXY: proxy, HTTP_PROXY: proxy, https_proxy: proxy, http_proxy: proxy, NO_PROXY: '127.0.0.1,localhost', no_proxy: '127.0.0.1,localhost' });
  }
  const upstream = upstreamOf(spec, driver);
  const baseUrl = upstream === undefined ? undefined : door.gateway.sandboxBaseUrl(port);
  if (!door.loopback) return { env: out, baseUrl };
  // The loopback: its URL and the run's token as variables; each CLI's config names the variable, never the token.
  const url = `http://127.0.0.1:${port}${LOOPBACK_PATH}`;
  out[LOOPBACK_TOKEN_ENV] = door.loopback.token;
  out[LOOPBACK_URL_ENV] = url;
  return { env: out, baseUrl, mcp: { url, tokenEnv: LOOPBACK_TOKEN_ENV } };
}
