/** A typed client for services: start agent runs and operate them (status, cancel, retry, reply). */
import { randomUUID } from 'node:crypto';
import { Client, Connection, WorkflowExecutionAlreadyStartedError, WorkflowFailedError, WorkflowNotFoundError, WorkflowUpdateFailedError, type ConnectionLike, type WorkflowHandle } from '@temporalio/client';
import { CancelledFailure, WorkflowIdReusePolicy, type DataConverter } from '@temporalio/common';
import { dataConverterFromEnvironment } from '../codec/keys.js';
import { z } from 'zod';
import { repositorySourceProblem } from '../contracts/repository.js';
import { claimCheck, type BlobStore } from '../blobs/store.js';
import { previewOf } from '../contracts/text-ref.js';
import { defaultTaskQueue } from '../worker-defaults.js';
import { roundUsd } from '../contracts/money.js';
import type { agentRun } from '../workflows/agent-run.js';
import type { ApprovalDecisionResult, ApproveOptions, DenyOptions, PendingApprovalView } from '../workflows/approvals.js';
import { abandonUpdate, approveUpdate, cancelSignal, cancelUpdate, denyUpdate, operatorInputLimits, replyUpdate, retryTurnUpdate, statusQuery } from '../workflows/messages.js';
import { idProblem } from '../workflows/ids.js';
import { signDecision, textDigest, type DecisionFields, type DecisionTarget, type OperatorSigner, type SignedDecision } from '../operators/index.js';
import { OUTCOME_MEMO_KEY, isRunResult, resultFromFailure } from '../workflows/outcomes.js';
import { inFlightTurn } from './live.js';
import { followRunEvents, ledgerCursor, type RunEvent, type RunEventSource } from './events.js';
import { sampleRunEvents } from './temporal-events.js';
import { resolveTemporalConnection } from './connect.js';
import { agentAttribute, statusAttribute, tenantAttribute } from '../workflows/search-attributes.js';
import { workflowVersion, type AgentRunInput, type AgentRunResult, type InFlightTurn, type RunStatusView } from '../workflows/types.js';

export type { AgentRunInput, AgentRunResult, InFlightTurn, RunStatusView };
export type { ApprovalDecisionResult, ApproveOptions, DenyOptions, PendingApprovalView };
export { postgresEventSource } from './postgres-events.js';
export type { RunEvent, RunEventSource, StoredEvent, ToolUse, ToolKind } from './events.js';
export { operatorSignerFrom, type OperatorSigner } from '../operators/index.js';
export { TemporalConfigError, resolveTemporalConnection, type TemporalConnection, type TemporalConnectOptions } from './connect.js';

/** An id checked against its rule (src/workflows/ids.ts): the message names the limit and what ids may contain. */
const id = (kind: Parameters<typeof idProblem>[1], empty: string) =>
  z.string().min(1, empty).superRefine((value, ctx) => {
    const problem = value.length > 0 ? idProblem(value, kind) : undefined;
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });

const startInputSchema = z.object({
  agent: id('agent', 'name the agent to run (see the catalog)'),
  task: z
    .string()
    .min(1, 'give the run a task')
    .superRefine((task, ctx) => {
      const bytes = Buffer.byteLength(task, 'utf8');
      if (bytes > maxTaskBytes) {
        ctx.addIssue({ code: 'custom', message: `the task is ${bytes} bytes, over the limit of ${maxTaskBytes} bytes (1 MiB; Temporal refuses payloads over 2 MB): put large inputs in files of the workspace and name them in the task` });
      }
    }),
  identity: z.object({
    tenantId: id('identity', 'identity.tenantId comes from your authentication and must not be empty'),
    userId: id('identity', 'identity.userId comes from your authentication and must not be empty'),
  }),
  parentWorkflowId: z.string().optional(),
  resumeSessionId: z.string().optional(),
  workflowId: id('workflowId', 'must not be empty').optional(),
  taskQueue: z.string().optional(),
  repository: z
    .strictObject({
      source: z
        .string()
        .max(2_000)
        .superRefine((source, ctx) => {
          const problem = repositorySourceProblem(source);
          if (problem) ctx.addIssue({ code: 'custom', message: problem });
        })
        .optional(),
      ref: z.string().min(1).max(200).optional(),
      branch: z.string().min(1).max(200).optional(),
    })
    .optional(),
});

/** A task travels inline in the run's first history event. */
const maxTaskBytes = 1024 * 1024;

export type StartAgentRunInput = AgentRunInput & {
  readonly workflowId?: string;
  readonly taskQueue?: string;
  /**
   * Eager workflow start: the server hands the first workflow task straight back to a worker on this client's
   * connection, saving a round trip. Only when the client was made from the worker's `NativeConnection`.
   */
  readonly eager?: boolean;
};

/** Raised for input a run cannot start with (or an operator input it cannot take); the message says what to fix. */
export class InvalidRunInputError extends Error {
  override readonly name = 'InvalidRunInputError';
}

/**
 * Raised when a start names a run id that already exists, running or ended: run ids are never reused, so two runs
 * can never share one history or one ledger row.
 */
export class RunIdTakenError extends Error {
  override readonly name = 'RunIdTakenError';
  constructor(
    readonly workflowId: string,
    readonly existingStatus: string | undefined,
  ) {
    super(
      `run id "${workflowId}" is already taken by a ${existingStatus ? `${existingStatus.toLowerCase()} ` : ''}run; run ids are never reused. ` +
        'Choose another id, or leave it out to get a fresh one.',
    );
  }
}

/**
 * Operations on one run. With an operator key (`getAgentRun(client, id, { operator })`) every decision — approve,
 * deny, reply, retry, abandon, cancel — is signed with it (src/operators), as a deployment with signed decisions
 * requires; without one they are sent unsigned, which only a trusted-network deployment accepts.
 */
export class AgentRunHandle {
  private target: Promise<DecisionTarget> | undefined;

  constructor(
    readonly handle: WorkflowHandle<typeof agentRun>,
    private readonly operator?: OperatorSigner,
  ) {}

  get workflowId(): string {
    return this.handle.workflowId;
  }

  /** The same run, its decisions signed with `operator`'s key. */
  signedBy(operator: OperatorSigner): AgentRunHandle {
    return new AgentRunHandle(this.handle, operator);
  }

  /** The signature over `fields` for this run, when this handle has an operator key. */
  private async signed(fields: DecisionFields): Promise<{ signed?: SignedDecision }> {
    if (!this.operator) return {};
    this.target ??= this.handle.describe().then((d) => ({
      namespace: this.handle.client.options.namespace,
      workflowId: this.handle.workflowId,
      // The run's first execution: a decision can never apply to another run, even of the same id.
      runId: d.raw.workflowExecutionInfo?.firstRunId || d.runId,
    }));
    return { signed: signDecision(this.operator, await this.target, fields) };
  }

  /**
   * The run's state, counters, usage and cost (rounded to micro-dollars); while a turn runs, `inFlight` adds its live
   * heartbeat progress (`live: false` skips that extra call). Needs a worker to answer; with
   * `timeoutMs` it fails after that long instead of waiting for the server's own deadline.
   */
  async status(options: { timeoutMs?: number; live?: boolean } = {}): Promise<RunStatusView> {
    const query = () => this.handle.query(statusQuery);
    const view = options.timeoutMs ? await this.handle.client.withDeadline(Date.now() + options.timeoutMs, query) : await query();
    // While a turn runs, its heartbeats carry what the workflow does not know yet: tokens, cost, attempt, last event.
    const inFlight = view.state === 'running' && options.live !== false ? await inFlightTurn(this.handle).catch(() => undefined) : undefined;
    return { ...view, costUsd: roundUsd(view.costUsd), ...(inFlight ? { inFlight: inFlight.costUsd !== undefined ? { ...inFlight, costUsd: roundUsd(inFlight.costUsd) } : inFlight } : {}) };
  }

  /**
   * Waits for the run to end and returns its typed result, whatever the outcome: a failed or stopped run ends as a
   * Failed workflow and a cancelled one as Canceled (docs/OUTCOMES.md), and their results come from the failure's
   * details (or, for Canceled, the memo). Cost is rounded to micro-dollars. Throws only when the run ended without
   * a result of its own (terminated, timed out).
   */
  async result(): Promise<AgentRunResult> {
    let result: AgentRunResult;
    try {
      result = await this.handle.result();
    } catch (err) {
      const carried = err instanceof WorkflowFailedError ? (resultFromFailure(err) ?? (err.cause instanceof CancelledFailure ? await this.memoResult() : undefined)) : undefined;
      if (!carried) throw err;
      result = carried;
    }
    return { ...result, costUsd: roundUsd(result.costUsd) };
  }

  /** The typed result a Canceled run keeps in its memo. */
  private async memoResult(): Promise<AgentRunResult | undefined> {
    const { memo } = await this.handle.describe();
    const value = memo?.[OUTCOME_MEMO_KEY];
    return isRunResult(value) ? value : undefined;
  }

  /**
   * Cancels the run: the in-flight turn is killed, the session ended, the result says `cancelled` and the workflow
   * ends Canceled. With an operator key, a signed `cancelRun` update carries the reason; without one, the `cancel`
   * signal (taken only where decisions are not authenticated). Temporal's cancel request follows either.
   */
  async cancel(reason?: string): Promise<void> {
    inline('the cancel reason', reason);
    if (this.operator) {
      await rejectedWithReason(this.handle.executeUpdate(cancelUpdate, { args: [{ ...(reason ? { reason } : {}), ...(await this.signed({ action: 'cancel', ...(reason ? { reason } : {}) })) }] }));
    } else {
      await this.handle.signal(cancelSignal, reason);
    }
    // The decision alone may already have ended the run (it waits briefly for the request): then there is nothing to add.
    await this.handle.cancel().catch((err: unknown) => {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    });
  }

  /**
   * The run's events as they happen, oldest first, ending after the run's `end` event (src/client/events.ts). With
   * `source` (the ledger: `postgresEventSource(DATABASE_URL)`, or the SQLite tail of src/ledger/events.ts) every
   * event, resumable `since` an event's cursor with nothing seen twice; without one, sampled from Temporal's status
   * and heartbeat every 500 ms (./temporal-events.ts: coarser, and not resumable). `follow: false` stops at the end
   * of what the ledger holds.
   */
  events(options: RunEventsOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
    const { source, ...rest } = options;
    if (!source) {
      if (rest.since !== undefined) throw new InvalidRunInputError('resuming events from a cursor needs the ledger: pass { source } (postgresEventSource(DATABASE_URL)); without one they are sampled live from Temporal');
      return sampleRunEvents(this, rest);
    }
    try {
      ledgerCursor(rest.since);
    } catch (e) {
      throw new InvalidRunInputError((e as Error).message);
    }
    return followRunEvents(source, this.workflowId, { ...rest, closed: () => closedWithoutEnd(this.handle) });
  }

  /** Runs the failed turn again; rejected unless the run is awaiting an operator. */
  async retryTurn(): Promise<string> {
    return rejectedWithReason(this.handle.executeUpdate(retryTurnUpdate, { args: [await this.signed({ action: 'retry' })] }));
  }

  /** Ends an `awaiting_operator` run as failed; rejected (RunRejectedError, with the reason) in any other state. */
  async abandon(reason?: string): Promise<string> {
    inline('the abandon reason', reason);
    // An update, not the signal: the run's own validator decides, so the answer is never "done" when nothing happened.
    const fields = { action: 'abandon' as const, ...(reason ? { reason } : {}) };
    return rejectedWithReason(this.handle.executeUpdate(abandonUpdate, { args: [{ ...(reason ? { reason } : {}), ...(await this.signed(fields)) }] }));
  }

  /**
   * Answers a `chat` step; rejected unless the run waits for a reply. A reply over 4 MiB is refused here, before
   * anything is sent; one over 16 Ki characters goes into `blobs` (the workers' blob store, e.g. `new
   * LedgerBlobStore(ledger)`) and travels by reference, and without `blobs` it is refused with how to send it. With an
   * operator key the signature names the whole text's digest, which is also the reference's key.
   */
  async reply(text: string, options: { blobs?: BlobStore } = {}): Promise<string> {
    checkReply(text, options.blobs !== undefined);
    const reply = options.blobs ? await claimCheck(options.blobs, text, operatorInputLimits.inlineReplyChars) : text;
    return rejectedWithReason(this.handle.executeUpdate(replyUpdate, { args: [{ text: reply, ...(await this.signed({ action: 'reply', textSha256: textDigest(text) })) }] }));
  }

  /** The run's permission requests waiting for an operator (docs/permissions.md). */
  async pendingApprovals(options: { timeoutMs?: number } = {}): Promise<readonly PendingApprovalView[]> {
    return (await this.status(options)).pendingApprovals ?? [];
  }

  /** Allows a pending permission request (with `edit`: the edited input runs instead); RunRejectedError when unknown or already decided. */
  async approve(requestId: string, options: ApproveOptions = {}): Promise<ApprovalDecisionResult> {
    const { edit, scope, by } = options;
    inline('the operator name', by);
    if (edit !== undefined) inline('the edit', JSON.stringify(edit));
    const signed = await this.signed({ action: 'approve', requestId, ...(edit !== undefined ? { edit } : {}), ...(scope !== undefined ? { scope } : {}) });
    return rejectedWithReason(this.handle.executeUpdate(approveUpdate, { args: [{ requestId, ...(edit !== undefined ? { edit } : {}), ...(scope !== undefined ? { scope } : {}), ...(by !== undefined ? { by } : {}), ...signed }] }));
  }

  /** Denies a pending permission request (the reason is shown to the harness); RunRejectedError when unknown or already decided. */
  async deny(requestId: string, options: DenyOptions = {}): Promise<ApprovalDecisionResult> {
    const { reason, by } = options;
    inline('the operator name', by);
    inline('the deny reason', reason);
    const signed = await this.signed({ action: 'deny', requestId, ...(reason !== undefined ? { reason } : {}) });
    return rejectedWithReason(this.handle.executeUpdate(denyUpdate, { args: [{ requestId, ...(reason !== undefined ? { reason } : {}), ...(by !== undefined ? { by } : {}), ...signed }] }));
  }
}

export interface RunEventsOptions {
  /** The ledger to read the events from; absent = sampled from Temporal. */
  readonly source?: RunEventSource;
  /** Resume after this cursor (an event's `cursor`). */
  readonly since?: string;
  /** Ends the iteration. */
  readonly signal?: AbortSignal;
  /** `false`: stop at the end of what is stored instead of waiting for the run's end. */
  readonly follow?: boolean;
}

/** How a run Temporal closed ended, for a follower that waits for an end row that may never come (a terminated run). */
async function closedWithoutEnd(handle: WorkflowHandle): Promise<{ status: string; reason: string } | undefined> {
  const { status } = await handle.describe();
  if (status.name === 'RUNNING') return undefined;
  return { status: status.name === 'TIMED_OUT' ? 'timed_out' : status.name.toLowerCase(), reason: `the workflow is ${status.name} in Temporal and wrote no end event` };
}

/** Raised when a run rejects an update (e.g. a reply while it is not waiting for one); says why. */
export class RunRejectedError extends Error {
  override readonly name = 'RunRejectedError';
}

/**
 * Refuses a reply that no run takes, before anything is sent: over 4 MiB, or over the inline limit when it cannot go
 * by reference (`byReference`: the caller has the workers' blob store).
 */
export function checkReply(text: string, byReference: boolean): void {
  const { inlineReplyChars, maxReplyBytes } = operatorInputLimits;
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > maxReplyBytes) {
    throw new InvalidRunInputError(`the reply is ${bytes} bytes, over the limit of ${maxReplyBytes} bytes (4 MiB); nothing was sent: put large content in a file of the workspace and reply where it is`);
  }
  if (text.length > inlineReplyChars && !byReference) {
    throw new InvalidRunInputError(
      `the reply is ${text.length} characters, over the inline limit of ${inlineReplyChars}; nothing was sent. A longer reply travels by reference: ` +
        "pass { blobs } (the workers' blob store, new LedgerBlobStore(ledger)), or send it with `durable-harness reply RUN --file FILE` where the workers' ledger is",
    );
  }
}

/** Refuses an operator text that would travel inline above the cap, before anything is sent. */
function inline(what: string, text: string | undefined): void {
  const bytes = text === undefined ? 0 : Buffer.byteLength(text, 'utf8');
  if (bytes > operatorInputLimits.maxInlineBytes) {
    throw new InvalidRunInputError(`${what} is ${bytes} bytes, over the limit of ${operatorInputLimits.maxInlineBytes} bytes (16 KiB); nothing was sent: shorten it`);
  }
}

/** Update rejections carry the validator's reason in their cause: surface it. */
async function rejectedWithReason<T>(update: Promise<T>): Promise<T> {
  try {
    return await update;
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) throw new RunRejectedError(err.cause?.message ?? err.message, { cause: err });
    throw err;
  }
}

/**
 * A Temporal client for agent runs whose payload encoding (encryption) matches the workers': keys come from `env`
 * (DURABLE_HARNESS_PAYLOAD_KEYS) unless `dataConverter` is given.
 */
export function createAgentClient(
  connection: ConnectionLike,
  options: { namespace?: string; env?: Readonly<Record<string, string | undefined>>; dataConverter?: DataConverter } = {},
): Client {
  return new Client({
    connection,
    namespace: options.namespace ?? 'default',
    dataConverter: options.dataConverter ?? dataConverterFromEnvironment(options.env ?? process.env),
  });
}

/**
 * Connects a client for agent runs the way Temporal's own tools connect: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
 * TEMPORAL_API_KEY, TEMPORAL_TLS_* and a profile of the TOML config file (TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE,
 * else ~/.config/temporalio/temporal.toml when present); `options` take precedence. A setting that cannot be used
 * (a missing certificate file, an unknown profile) throws TemporalConfigError. Close it with `client.connection.close()`.
 */
export async function connectAgentClient(
  options: {
    address?: string;
    namespace?: string;
    profile?: string;
    configFile?: string;
    env?: Readonly<Record<string, string | undefined>>;
    dataConverter?: DataConverter;
  } = {},
): Promise<Client> {
  const env = options.env ?? process.env;
  const temporal = resolveTemporalConnection({ address: options.address, namespace: options.namespace, profile: options.profile, 'config-file': options.configFile }, env);
  const connection = await Connection.connect(temporal.connectOptions());
  return createAgentClient(connection, { namespace: temporal.namespace, env, dataConverter: options.dataConverter });
}

/** Refuses input a run cannot start with (ids, task), naming each problem and its limit: nothing is started. */
export function checkRunInput(input: StartAgentRunInput): void {
  const parsed = startInputSchema.safeParse(input);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.') || 'input'}: ${i.message}`).join('; ');
    throw new InvalidRunInputError(`cannot start the agent run: ${problems}`);
  }
}

/**
 * Starts an agent run and returns its handle; with `operator` (a service's own key, `operatorSignerFrom`), the
 * handle signs the decisions it sends, as a deployment with signed decisions requires.
 */
export async function startAgentRun(client: Client, input: StartAgentRunInput, options: { operator?: OperatorSigner } = {}): Promise<AgentRunHandle> {
  checkRunInput(input);
  const { workflowId, taskQueue, eager, ...rest } = input;
  // New runs take the current command sequence; a caller cannot choose an older one.
  const args: AgentRunInput = { ...rest, workflowVersion };
  const id = workflowId ?? `run-${input.agent}-${randomUUID().slice(0, 8)}`;
  const handle = await client.workflow
    .start<typeof agentRun>('agentRun', {
      taskQueue: taskQueue ?? defaultTaskQueue,
      workflowId: id,
      // An id is one run for ever: a start with an id that exists, open or closed, is refused.
      workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
      args: [args],
      ...(eager ? { requestEagerStart: true } : {}),
      staticSummary: `${input.agent}: ${previewOf(input.task, 100)}`,
      typedSearchAttributes: [
        { key: agentAttribute, value: input.agent },
        { key: tenantAttribute, value: input.identity.tenantId },
        { key: statusAttribute, value: 'starting' },
      ],
    })
    .catch(async (err: unknown) => {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      const status = await client.workflow
        .getHandle(id)
        .describe()
        .then((d) => d.status.name, () => undefined);
      throw new RunIdTakenError(id, status);
    });
  return new AgentRunHandle(handle, options.operator);
}

/** A handle to an existing run; with `operator`, its decisions are signed with that operator's key. */
export function getAgentRun(client: Client, workflowId: string, options: { operator?: OperatorSigner } = {}): AgentRunHandle {
  return new AgentRunHandle(client.workflow.getHandle<typeof agentRun>(workflowId), options.operator);
}
