/**
 * The activities of `agentRun`, made by a factory that receives their dependencies.
 * Adapters and sandbox handles live only inside an activity; between activities a session is a `SandboxRef`,
 * the agent a frozen spec's hash, and large texts references into the blob store.
 */
import { ApplicationFailure, Context, activityInfo, heartbeat } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { ActionRegistry } from '../actions/index.js';
import { findDriver, UnknownDriverError, type AdapterRegistry } from '../adapters/registry.js';
import { runDriverTurn } from '../adapters/engine.js';
import { collectTurn } from '../adapters/fold.js';
import { StopAtOnce, type HarnessEvent, type Usage } from '../adapters/types.js';
import { BlobMissingError, LedgerBlobStore, claimCheck, isBlobRef, previewOf, resolveText, type BlobStore, type TextRef } from '../blobs/index.js';
import type { Catalog } from '../catalog/schema.js';
import { findAgent, findHarness, promptWithContract } from '../catalog/index.js';
import { resolveCredentials, type CredentialStore } from '../credentials/index.js';
import { formatFeedback, parseEnvelope } from '../envelope/index.js';
import type { ActionCall, NextStep } from '../envelope/types.js';
import type { Ledger, RunStatus } from '../ledger/types.js';
import { UnresolvedAccountingError } from '../ledger/types.js';
import { createPermissionGate, ledgerApprovalBroker, policyIsInteractive } from '../permissions/index.js';
import type { ApprovalBroker } from '../permissions/index.js';
import type { ApprovalRecord } from '../ledger/types.js';
import type { RunIdentity, SandboxFs, SandboxHandle, SandboxProvider, SandboxRef } from '../sandbox/types.js';
import { SpecStore, freezeSpec, policyOf, type FrozenSpec, type RunPolicy } from '../spec/index.js';
import { formatActionResults, formatReplay, replyTooLargeProblem } from '../workflows/prompts.js';
import { MAX_HARNESS_MESSAGE_CHARS, MAX_SESSION_ID_CHARS, MAX_TURN_PROBLEM_CHARS, actionsStepView, boundedName, clipText as clip } from '../workflows/bounds.js';
import type {
  ActionOutcome,
  AgentRunResult,
  ConversationEntry,
  InheritedBudget,
  OpenRunFailure,
  RunOutcome,
  StepValidation,
  StepView,
  TurnRequest,
  TurnResult,
  TurnSpend,
} from '../workflows/types.js';
import { expandSandbox } from '../workflows/types.js';
import { addUsage, noUsage, totalTokens } from '../workflows/usage.js';
import { FailureTypes } from './failure-types.js';
import { announcingBroker, approvalActivities, attemptDeadlineMs, runAnnouncer } from './approvals.js';
import { claimSharedWorkspace } from './workspace-claim.js';
import { decisionActivities } from './decisions.js';
import type { DecisionMode, OperatorDirectory } from '../operators/index.js';
import { isRetryable, ProgressEvents, TurnAccounting, type BudgetCrossing } from './turn-accounting.js';
import { reportTurnIdentity } from '../observability/turn-telemetry.js';
import { harnessRedactor, redactDeep, redactFailure, redactStream, type Redactor } from './redaction.js';

/** Texts longer than this (characters) travel through workflow history by reference. */
export const DEFAULT_INLINE_TEXT_LIMIT = 16 * 1024;
/** How much of a refused (too large) reply the ledger keeps. */
const KEPT_REPLY_CHARS = 64 * 1024;

/** What `endSession` did: `elsewhere` when it was asked to run only on another host and did nothing. */
export interface EndSessionOutcome {
  readonly elsewhere: boolean;
}

/** Everything the activities need, injected by the worker (or a test). */
export interface ActivityDeps {
  /**
   * The current catalog; read when a run starts (its spec is frozen then), and by redaction, which must know
   * every secret the worker could hand any harness.
   */
  readonly catalog: () => Catalog;
  readonly adapters: AdapterRegistry;
  readonly sandboxes: Readonly<Record<string, SandboxProvider>>;
  readonly ledger: Ledger;
  readonly actions: ActionRegistry;
  readonly credentials: CredentialStore;
  /** Where large texts and frozen specs are kept (default: the ledger's blob table). */
  readonly blobs?: BlobStore;
  /** Texts longer than this travel through history by reference (default 16 KiB). */
  readonly inlineTextLimit?: number;
  /** The server environment credentials may fall back to (default: process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Heartbeat at least this often while a turn runs (ms). */
  readonly heartbeatIntervalMs?: number;
  /** How long a cancelled turn still waits for an unwritable ledger before giving its rows up to the log (ms). */
  readonly cancelledAccountingGraceMs?: number;
  /** Who answers permission requests the policy leaves open (default: the ledger, polled every `approvalPollMs`). */
  readonly approvals?: ApprovalBroker;
  readonly approvalPollMs?: number;
  /** Told when a request becomes pending (e.g. to show it on the workflow); errors are logged, never fatal. */
  readonly onPendingApproval?: (record: ApprovalRecord) => Promise<void>;
  /**
   * This worker's own task queue (`<queue>@<host id>`, which it also polls): recorded in the ref of every
   * host-bound sandbox it starts, so the run's later activities come back here (docs/multi-host.md).
   */
  readonly hostQueue?: string;
  /** The operators whose signed decisions this worker accepts (src/operators; default: none). */
  readonly operators?: () => OperatorDirectory;
  /** Whether operator decisions must be signed (default `signed`; `dev` runs `trusted-network`). */
  readonly decisionMode?: DecisionMode;
}

export function createActivities(deps: ActivityDeps) {
  const env = deps.env ?? process.env;
  const blobs = deps.blobs ?? new LedgerBlobStore(deps.ledger);
  const specs = new SpecStore(blobs);
  const inlineTextLimit = deps.inlineTextLimit ?? DEFAULT_INLINE_TEXT_LIMIT;
  const redactors = new WeakMap<Catalog, Redactor>();

  /**
   * Redacts every secret the worker could hand any harness under the current catalog (see redaction.ts), plus
   * `extra` (the run's own). Without a readable catalog: the credential store's values and `extra`.
   */
  function redactorFor(extra: readonly string[] = []): Redactor {
    let catalog: Catalog | undefined;
    try {
      catalog = deps.catalog();
    } catch {
      catalog = undefined;
    }
    const known = catalog ?? { agents: [], harnesses: [] };
    if (extra.length > 0 || !catalog) return harnessRedactor(known as Catalog, deps.credentials, env, extra);
    let base = redactors.get(catalog);
    if (!base) redactors.set(catalog, (base = harnessRedactor(catalog, deps.credentials, env)));
    return base;
  }

  function provider(name: string): SandboxProvider {
    const p = deps.sandboxes[name];
    if (!p) {
      throw ApplicationFailure.nonRetryable(
        `Sandbox provider "${name}" is not configured on this worker (available: ${Object.keys(deps.sandboxes).join(', ')}). Fix sandbox.provider in the catalog or start the worker with that provider.`,
        FailureTypes.SandboxProviderUnknown,
      );
    }
    return p;
  }

  const loadSpec = (hash: string) => blobCall(() => specs.load(hash));
  const text = (ref: TextRef) => blobCall(() => resolveText(blobs, ref));
  // Blob writes are ledger writes: an unwritable ledger makes them wait and retry, never fail the run.
  const checked = (value: string) => waitForLedger(() => claimCheck(blobs, value, inlineTextLimit));

  /** Checks what the catalog asks for against this worker, then freezes it. */
  function freeze(agentName: string): FrozenSpec {
    const catalog = deps.catalog();
    const agent = permanent(() => findAgent(catalog, agentName), FailureTypes.UnknownAgent);
    const harness = permanent(() => findHarness(catalog, agent.harness), FailureTypes.UnknownHarness);
    if (!harness.active) {
      throw ApplicationFailure.nonRetryable(
        `Harness "${harness.name}" is inactive. Install its binary (${harness.executable}), then set "active: true" for it in the catalog.`,
        FailureTypes.InactiveHarness,
      );
    }
    if (!deps.adapters.has(harness.driverClass)) {
      throw ApplicationFailure.nonRetryable(new UnknownDriverError(harness.driverClass, [...deps.adapters.keys()].sort()).message, FailureTypes.UnknownDriver);
    }
    const sandboxProvider = provider(agent.sandbox.provider);
    if (agent.sandbox.workspaceScope !== 'parent' && sandboxProvider.enforces(agent.sandbox.networkPolicy) === 'refused') {
      throw ApplicationFailure.nonRetryable(`Agent "${agent.name}": ${sandboxProvider.refusalOf(agent.sandbox.networkPolicy)}`, FailureTypes.SandboxPolicyRefused);
    }
    // Fail at resolution, not three attempts later: a harness whose key cannot be resolved never works.
    permanent(() => resolveCredentials({ agent, harness, store: deps.credentials, env }), FailureTypes.CredentialMissing);
    const spec = permanent(() => freezeSpec(catalog, agentName, deps.actions, findDriver(deps.adapters, harness.driverClass).capabilities), FailureTypes.UnknownAgent);
    const policy = spec.agent.permissions;
    if (!spec.agent.permissionsEnforced && !policy.advisory) {
      const what = policy.posture === 'strict' ? 'permission posture "strict"' : 'permission rules';
      throw ApplicationFailure.nonRetryable(
        `Agent "${agent.name}" has ${what}, but harness "${harness.name}" (${harness.driverClass}) cannot ask before a tool runs ` +
          '(no permission hooks), so it could not be enforced. Use a harness with permission hooks, use "auto" without rules, ' +
          'or set permissions.advisory: true for this agent to run it with the posture reported as not enforced.',
        FailureTypes.PermissionHooksMissing,
      );
    }
    return spec;
  }

  /** Starts the agent's sandbox on this worker; a host-bound one records this worker's host queue. */
  async function startSandbox(spec: FrozenSpec, input: { workflowId: string; runId: string; identity: RunIdentity }): Promise<SandboxRef> {
    const p = provider(spec.agent.sandbox.provider);
    const ref = await sandboxCall(() => p.start({ workflowId: input.workflowId, runId: input.runId, agent: spec.agent.name, identity: input.identity, spec: spec.agent.sandbox }));
    return p.hostBound && deps.hostQueue ? { ...ref, hostQueue: deps.hostQueue } : ref;
  }

  /**
   * Kept so histories that schedule it still replay: `runTurn` records each attempt's prompt run and usage itself.
   * Writes nothing.
   */
  async function recordPromptRun(input: { workflowId: string; turn: number } & Record<string, unknown>): Promise<{ inserted: boolean }> {
    void input;
    return { inserted: false };
  }

  /**
   * Parses the envelope against the frozen rules and records the step: the step and per-call parameter problems, or the
   * problem. Parsing decodes the envelope's JSON (a key spelled `\u0073k-…` becomes the key), so what it yields is
   * redacted again.
   */
  async function validateStep(input: { workflowId: string; turn: number; seq: number; text: string; specHash: string }, redact = redactorFor()): Promise<StepValidation> {
    const spec = await loadSpec(input.specHash);
    const parsed = redactDeep(parseEnvelope(input.text, spec.envelopeRules), redact);
    const overCap = parsed.ok ? undefined : parsed.actionsOverCap;
    await waitForLedger(() =>
      deps.ledger.recordStep({
        workflowId: input.workflowId,
        seq: input.seq,
        turn: input.turn,
        type: parsed.ok ? `step:${parsed.step.step}` : overCap ? 'actions-over-cap' : 'malformed-envelope',
        payload: parsed.ok ? { step: parsed.step, actionErrors: parsed.actionErrors } : { problem: parsed.problem, ...overCap },
      }),
    );
    if (overCap) await waitForLedger(() => deps.ledger.appendEvent(input.workflowId, input.turn, 'actions-over-cap', overCap));
    if (!parsed.ok) return { ok: false, problem: parsed.problem, feedback: formatFeedback(parsed.problem) };
    // Only parameter problems: which actions and sub-agents are allowed is the workflow's decision (planActions).
    const problems: (string | undefined)[] = parsed.step.step === 'actions' ? parsed.step.actions.map(() => undefined) : [];
    for (const e of parsed.actionErrors) if (e.kind === 'invalid-params') problems[e.index] = e.problem;
    return { ok: true, step: parsed.step, actionProblems: problems };
  }

  /**
   * Runs one action the workflow approved, at most once per (workflow, seq): its start is recorded before it runs,
   * its outcome after; a retried attempt reuses a recorded outcome and never runs a started action again.
   * Actions get the sandbox's `fs` (files where the sandbox is, links never followed), never a host path; what
   * they return comes from the workspace, which the harness writes, so it is redacted like harness output.
   */
  async function executeAction(input: { workflowId: string; specHash: string; sandbox: SandboxRef; call: ActionCall; seq: number; turn: number }): Promise<ActionOutcome> {
    const handle = await sandboxCall(() => provider(input.sandbox.provider).attach(input.sandbox));
    try {
      return await runAction(input, handle.fs, redactorFor());
    } finally {
      await handle.release().catch(() => undefined);
    }
  }

  /** `executeAction` with the turn's sandbox files and redactor. */
  async function runAction(input: { workflowId: string; specHash: string; call: ActionCall; seq: number; turn: number }, fs: SandboxFs, redact: Redactor): Promise<ActionOutcome> {
    const spec = await loadSpec(input.specHash);
    const type = `action:${input.call.name}`;
    const earlier = await waitForLedger(() => deps.ledger.getStep(input.workflowId, input.seq));
    const interrupted: ActionOutcome = { ok: false, error: `action "${input.call.name}" was started by an earlier, interrupted attempt of this turn; its outcome is unknown and it was not run again` };
    if (earlier) return (earlier.payload as { outcome?: ActionOutcome }).outcome ?? interrupted;
    const call = redactDeep(input.call, redact);
    const { inserted } = await waitForLedger(() => deps.ledger.recordStep({ workflowId: input.workflowId, seq: input.seq, turn: input.turn, type, payload: { call } }));
    if (!inserted) return interrupted;
    const config = spec.actions.find((a) => a.name === input.call.name);
    const def = config && deps.actions.get(config.implementation);
    let outcome: ActionOutcome;
    if (!config || !def) {
      outcome = { ok: false, error: `action "${input.call.name}" has no implementation on this worker` };
    } else {
      const parsed = def.parameters.safeParse(input.call.params);
      if (!parsed.success) {
        outcome = { ok: false, error: `invalid parameters: ${parsed.error.message}` };
      } else {
        try {
          const output = await def.execute(parsed.data, {
            workflowId: input.workflowId,
            agent: spec.agent.name,
            fs,
            settings: config.settings,
            signal: Context.current().cancellationSignal,
          });
          outcome = { ok: true, output };
        } catch (err) {
          outcome = { ok: false, error: err instanceof Error ? err.message : String(err) };
        }
      }
    }
    outcome = redactDeep(outcome, redact);
    await waitForLedger(() => deps.ledger.completeStep(input.workflowId, input.seq, { call, outcome }));
    return outcome;
  }

  /** The harness's input for this turn: the composed prompt, the feedback, or the results of the approved actions. */
  async function composeInput(req: RunTurn, fs: SandboxFs, redact: Redactor): Promise<string> {
    const input = req.input;
    switch (input.kind) {
      case 'prompt':
        return (await Promise.all(input.parts.map(text))).join('');
      case 'feedback':
        return formatFeedback(input.problem);
      case 'actions': {
        const envelope = await waitForLedger(() => deps.ledger.getStep(req.workflowId, input.envelopeSeq));
        const step = (envelope?.payload as { step?: NextStep } | undefined)?.step;
        if (step?.step !== 'actions') {
          throw ApplicationFailure.nonRetryable(`the ledger has no actions envelope at seq ${input.envelopeSeq} of ${req.workflowId}: was it replaced while the run was in flight?`, FailureTypes.LedgerInconsistent);
        }
        const outcomes: ActionOutcome[] = [];
        for (const planned of input.calls) {
          const call = step.actions[planned.index]!;
          outcomes.push('refused' in planned ? { ok: false, error: planned.refused } : await runAction({ workflowId: req.workflowId, specHash: req.specHash, call, seq: planned.seq, turn: req.turn - 1 }, fs, redact));
        }
        return formatActionResults(step.actions, outcomes);
      }
    }
  }

  /**
   * The conversation before `turn`, from the ledger's prompt runs: what a fresh session is given to continue. Only
   * the attempt whose output the run used counts for a turn (failed and superseded attempts are not conversation).
   */
  async function conversationBefore(workflowId: string, turn: number): Promise<ConversationEntry[]> {
    const rows = (await deps.ledger.listPromptRuns(workflowId)).filter((r) => r.turn < turn && r.outputUsed);
    return rows.flatMap((r): ConversationEntry[] => [{ role: 'user', text: r.input }, { role: 'assistant', text: r.output }]);
  }

  /**
   * The step as the workflow keeps it: large texts by reference, parameters left in the ledger, and every name and
   * problem the harness made bounded (workflows/bounds.ts): the envelope's calls are capped already.
   */
  async function viewOf(validation: Extract<StepValidation, { ok: true }>, rules: FrozenSpec['envelopeRules']): Promise<StepView> {
    const step = validation.step;
    switch (step.step) {
      case 'success':
        return { step: 'success', result: await checked(step.result) };
      case 'failed':
        return { step: 'failed', reason: await checked(step.reason) };
      case 'chat':
        return { step: 'chat', message: await checked(step.message) };
      case 'sub-agent':
        return { step: 'sub-agent', agent: boundedName(step.agent, (n) => rules.allowedSubAgents.includes(n)), message: await checked(step.message), terminateAfter: step.terminateAfter };
      case 'actions':
        return actionsStepView(step, validation.actionProblems, (n) => Object.prototype.hasOwnProperty.call(rules.allowedActions, n));
    }
  }

  /** Turns this process is running now: a pinned turn that ends alone on its host says so (`TurnResult.hostIdle`). */
  let turnsRunning = 0;
  /** Whether this worker holds `sandbox` (its host queue is this worker's) and runs no turn but `own` of its own. */
  const hostIdle = (sandbox: { readonly hostQueue?: string }, own: number) => turnsRunning === own && sandbox.hostQueue !== undefined && sandbox.hostQueue === deps.hostQueue;

  const activities = {
    /** Resolves the agent from the catalog, freezes its spec into the ledger, and returns what the workflow keeps. */
    async resolveAgent(input: { agent: string; budget?: InheritedBudget }): Promise<RunPolicy> {
      const spec = freeze(input.agent);
      const hash = await waitForLedger(() => specs.save(spec));
      // The accounting ids of this spec resolve in the ledger for as long as the run lives, whatever the catalog does.
      await waitForLedger(() =>
        deps.ledger.syncCatalog({
          vendors: [{ id: spec.harness.vendor, name: spec.harness.vendor }],
          models: [{ id: `${spec.harness.vendor}/${spec.harness.model}`, vendorId: spec.harness.vendor, name: spec.harness.model }],
          prompts: [{ id: spec.agent.promptId, name: spec.agent.name, text: spec.agent.systemPrompt }],
        }),
      );
      return policyOf(spec, hash, { budget: input.budget, inlineTextLimit, decisions: deps.decisionMode ?? 'signed' });
    },

    /** Creates (or reattaches, or borrows the parent's) sandbox and the ledger row; a large task goes by reference. */
    async startSession(input: {
      workflowId: string;
      runId: string;
      specHash: string;
      identity: RunIdentity;
      task: TextRef;
      parentWorkflowId?: string;
      parentSandbox?: SandboxRef;
    }): Promise<{ sandbox: SandboxRef; task: TextRef; hostIdle?: true }> {
      const spec = await loadSpec(input.specHash);
      const task = isBlobRef(input.task) ? input.task : await checked(input.task);
      await waitForLedger(() =>
        deps.ledger.startRun({
          workflowId: input.workflowId,
          runId: input.runId,
          agent: spec.agent.name,
          harness: spec.harness.name,
          tenantId: input.identity.tenantId,
          userId: input.identity.userId,
          task: isBlobRef(input.task) ? previewOf(input.task) : input.task,
          parentWorkflowId: input.parentWorkflowId,
        }),
      );
      // What the posture becomes on this harness, for operators reading the run's record.
      const policy = spec.agent.permissions;
      const report = deps.adapters.has(spec.harness.driverClass) ? findDriver(deps.adapters, spec.harness.driverClass).permissions(policy.posture) : undefined;
      await waitForLedger(() =>
        deps.ledger.appendEvent(
          input.workflowId,
          0,
          'permissions',
          {
            posture: policy.posture,
            rules: { allow: policy.allow.length, deny: policy.deny.length, ask: policy.ask.length },
            gated: policyIsInteractive(policy),
            enforced: spec.agent.permissionsEnforced,
            note: !spec.agent.permissionsEnforced ? `advisory: harness "${spec.harness.name}" cannot ask before a tool runs` : report?.note,
          },
          input.runId,
        ),
      );
      if (spec.agent.sandbox.workspaceScope === 'parent') {
        if (!input.parentSandbox) {
          throw ApplicationFailure.nonRetryable(`Agent "${spec.agent.name}" has workspaceScope "parent", which only a sub-agent can use: run it as another agent's sub-agent, or give it another scope.`, FailureTypes.WorkspaceScopeInvalid);
        }
        return { sandbox: input.parentSandbox, task, ...(hostIdle(input.parentSandbox, 0) ? { hostIdle: true as const } : {}) };
      }
      const sandbox = await startSandbox(spec, input);
      // This worker runs the workflow task that scheduled this local activity: idle, it can take the first turn at once.
      return { sandbox, task, ...(hostIdle(sandbox, 0) ? { hostIdle: true as const } : {}) };
    },

    /**
     * The worker holding the run's workspace is gone (`sandbox.onHostLoss: reprovision`): a fresh workspace on this
     * worker; the next turn replays the conversation from the ledger. The lost workspace is not touched.
     */
    async reprovisionSession(input: { workflowId: string; runId: string; specHash: string; identity: RunIdentity; lost: SandboxRef; turn: number; reason: string }): Promise<SandboxRef> {
      const spec = await loadSpec(input.specHash);
      const sandbox = await startSandbox(spec, input);
      await deps.ledger.appendEvent(input.workflowId, input.turn, 'host-lost', {
        lostHostQueue: input.lost.hostQueue ?? null,
        lostWorkspace: input.lost.hostWorkspacePath,
        hostQueue: sandbox.hostQueue ?? null,
        workspace: sandbox.hostWorkspacePath,
        reason: input.reason,
      });
      return sandbox;
    },

    /**
     * What one turn spent by the ledger's books: every call of every attempt (failed, cancelled, lost with its worker).
     * The workflow asks when a run is interrupted mid-turn, whose spend no turn result or failure brought it.
     */
    async turnSpent(input: { workflowId: string; runId: string; turn: number }): Promise<{ usage: Usage; costUsd: number; costBlind: boolean; attempts?: number }> {
      const totals = await waitForLedger(() => deps.ledger.runTotals(input.workflowId, input.runId, { turn: input.turn }));
      // `attempts`: how many attempts of the turn began (the workflow tells attempts a frozen worker never ran).
      return { usage: totals.usage, costUsd: totals.costUsd, costBlind: totals.costBlind, attempts: totals.attempts };
    },

    /** Stores a large text (a chat reply) and returns its reference. */
    async storeText(input: { text: string }): Promise<TextRef> {
      return checked(input.text);
    },

    /**
     * One turn, inside one attempt: run the actions the workflow approved → drive the harness (heartbeating; dies
     * with the turn when cancelled) → account for it as it streams → validate the envelope → return a small result.
     *
     * Accounting is the activity's own, per attempt and per model call: the attempt's prompt run is opened before the
     * harness starts, every usage event is a ledger row at once, and the row is closed with what became of the
     * attempt, so a failed, killed or lost attempt's tokens are in the ledger too (and in a failure's details). With
     * `budget`, streaming usage that crosses the run's remaining tokens or cost stops the harness mid-turn
     * (`budgetExhausted`).
     */
    async runTurn(request: TurnRequest): Promise<TurnResult> {
      if (request.onlyOnHost && request.sandbox.hostQueue !== deps.hostQueue) await turnElsewhere(request, deps);
      // Handed to this worker while it was frozen, and already timed out: stop before touching the sandbox.
      await stopIfStale(request.turn);
      const spec = await loadSpec(request.specHash);
      const { name: harnessName, driverClass, vendor, model } = spec.harness;
      reportTurnIdentity({ agent: spec.agent.name, harness: harnessName, driverClass, vendor, model });
      const ctx = Context.current();
      const info = activityInfo();
      if (!info.workflowExecution) throw ApplicationFailure.nonRetryable('runTurn runs only as an activity of an agentRun workflow', FailureTypes.TurnFailed);
      // The ledger's run: this execution's run id, which the ledger resolves to the run's row (continue-as-new
      // executions have another id: the ledger then takes the latest run of the workflow id, the open one).
      const runId = info.workflowExecution.runId;
      const req: RunTurn = { ...request, sandbox: expandSandbox(request.sandbox), workflowId: info.workflowExecution.workflowId, runId };
      const credentials = permanent(
        () => resolveCredentials({ agent: { name: spec.agent.name, credentials: [...spec.agent.credentials] }, harness: spec.harness, store: deps.credentials, env, log: ctx.log }),
        FailureTypes.CredentialMissing,
      );
      const redact = redactorFor(credentials.secrets);
      // One attempt of one scheduling of this turn: Temporal retries, operator retries and fresh-session replays
      // each get their own id, so their rows never collide and none is counted twice.
      const scheduling = `${runId}:${info.activityId}:${req.turn}`;
      const attemptId = `${scheduling}:${info.attempt}`;
      const progress: TurnProgress = { turn: req.turn, attempt: info.attempt, lastEvent: 'starting', tokens: 0, costUsd: 0, events: 0, ledger: 'ok' };
      const ledgerState = (err: Error | undefined) => {
        progress.ledger = err ? `waiting for the ledger: ${err.message}` : 'ok';
        if (err) ctx.log.warn('ledger write failed; retrying', { workflowId: req.workflowId, turn: req.turn, error: err.message });
      };
      const events = new ProgressEvents(deps.ledger, { workflowId: req.workflowId, runId, turn: req.turn }, { onFault: ledgerState });
      const beat = () => heartbeat({ ...progress });
      const timer = setInterval(beat, deps.heartbeatIntervalMs ?? 250);
      /** Set once the harness asked past the policy's cap: how many were denied without asking. */
      let permissionsOverCap: { cap: number; denied: number } | undefined;
      const gate = createPermissionGate({
        ledger: deps.ledger,
        workflowId: req.workflowId,
        runId,
        turn: req.turn,
        policy: spec.agent.permissions,
        workspace: req.sandbox.workspacePath,
        broker:
          deps.approvals ??
          announcingBroker({
            inner: ledgerApprovalBroker({
              ledger: deps.ledger,
              pollMs: deps.approvalPollMs,
              onPending: (record) => deps.onPendingApproval?.(record).catch((err: unknown) => ctx.log.warn('onPendingApproval failed', { error: String(err) })),
            }),
            ledger: deps.ledger,
            announce: runAnnouncer(workerClient(ctx), info.workflowExecution, ctx.log),
            deadlineMs: attemptDeadlineMs(info),
          }),
        redact,
        onAsk: (request, approvalId) => {
          progress.pendingApproval = approvalId;
          progress.lastEvent = redact(`waiting for approval ${approvalId}: ${request.title}`).slice(0, 200);
          beat();
        },
        onDecision: () => {
          delete progress.pendingApproval;
        },
        onOverCap: (cap, denied) => {
          if (denied === 1) {
            // One event and one log line for the attempt, not one per request (nor their request and decision events).
            events.append('permission-requests-over-cap', { cap });
            ctx.log.warn(`turn ${req.turn} of ${req.workflowId}: more than ${cap} permission requests; the rest are denied without asking`);
          }
          permissionsOverCap = { cap, denied };
        },
      });
      // The harness stops when the turn is cancelled or its streaming usage crosses the budget. Accounting waits for
      // the ledger; only a cancelled attempt stops waiting, after a grace period, so a cancellation always completes.
      const stopTurn = new AbortController();
      const runs: HarnessRun[] = [];
      let giveUp: NodeJS.Timeout | undefined;
      const onCancel = () => {
        stopTurn.abort(ctx.cancellationSignal.reason);
        giveUp = setTimeout(() => {
          for (const r of runs) r.accounting.stop('the attempt was cancelled and the ledger stayed unwritable');
        }, deps.cancelledAccountingGraceMs ?? 10_000);
      };
      ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
      /** What earlier attempts of this scheduling spent (failed, timed out, lost with their worker): read once, on a retry. */
      let earlier: EarlierSpend | undefined;
      // The turn's spend as the workflow counts it: this attempt's, plus what its earlier attempts spent — Temporal
      // hands the workflow only the last attempt's result or failure, so that is where the earlier ones reach it.
      const spent = (usageMissing = false): TurnSpend => withEarlier(spendOf(runs, info.attempt, usageMissing), earlier);
      let handle: SandboxHandle | undefined;
      const harness = (): TurnHarness => ({
        handle: handle!,
        secretEnv: credentials.env,
        gate,
        progress,
        redact,
        signal: stopTurn.signal,
        events,
        ledgerState,
        stop: (reason) => stopTurn.abort(reason),
        overCap: () => permissionsOverCap !== undefined,
      });
      /** Closes the harness run's prompt run (once), with what became of it. */
      const finish = async (run: HarnessRun, f: Omit<Parameters<TurnAccounting['finish']>[0], 'resumed' | 'durationMs'>) => {
        if (run.finished) return;
        run.finished = true;
        progress.lastEvent = `recording turn ${req.turn}`;
        const sessionId = run.turn?.sessionId ?? run.sessionId;
        const model = run.turn?.model ?? run.model;
        await run.accounting.finish({
          ...f,
          resumed: run.turn?.resumed === true || run.resumed,
          durationMs: Date.now() - run.startedAt,
          ...(sessionId ? { externalSessionId: sessionId } : {}),
          ...(model ? { reportedModel: model } : {}),
        });
        // Every row of this attempt landed, re-reported calls of earlier attempts included: read what those spent.
        if (info.attempt > 1) earlier = await waitForLedger(() => earlierSpend(deps.ledger, req.workflowId, runId, req.turn, scheduling, attemptId));
      };
      try {
        // A shared workspace is one run's at a time (workspace-claim.ts): wait for it, or refuse, as configured.
        let waitAnnounced = false;
        await claimSharedWorkspace({
          ledger: deps.ledger,
          scope: spec.agent.sandbox.workspaceScope,
          mode: spec.agent.sandbox.concurrentRuns ?? 'wait',
          sandbox: req.sandbox,
          holder: { workflowId: req.workflowId, runId },
          deadlineMs: attemptDeadlineMs(info),
          signal: stopTurn.signal,
          pollMs: deps.approvalPollMs,
          onWait: (detail, holder) => {
            if (detail && !waitAnnounced) {
              waitAnnounced = true;
              events.append('workspace-wait', { holder: holder.workflowId, workspace: req.sandbox.hostWorkspacePath });
            }
            progress.lastEvent = detail ?? 'starting';
            beat();
          },
        });
        handle = await sandboxCall(() => provider(req.sandbox.provider).attach(req.sandbox));
        if (info.attempt > 1 || request.cleanFirst) {
          // A crashed or timed-out earlier attempt may have left its process running: never run two at once.
          await handle.killLeftovers();
          if (info.attempt > 1) events.append('retry', { attempt: info.attempt });
        }
        const prompt = await composeInput(req, handle.fs, redact);
        beat();
        const withHistory = async () => (req.turn > 1 ? formatReplay(await conversationBefore(req.workflowId, req.turn), prompt) : prompt);
        const accountingFor = (id: string) =>
          new TurnAccounting(
            deps.ledger,
            { workflowId: req.workflowId, runId, turn: req.turn, attempt: info.attempt, attemptId: id },
            {
              prices: spec.harness.prices,
              budget: req.budget,
              onFault: ledgerState,
              onAbandoned: (row, reason) => ctx.log.error('ledger row NOT written (enter it by hand once the ledger is back)', { row, reason }),
            },
          );
        let resumeFailed: string | undefined;
        let run = await driveHarness(spec, req, harness(), accountingFor(attemptId), (id) => id.startsWith(`${scheduling}:`), runs, req.replay ? await withHistory() : prompt, req.resumeSessionId, prompt);
        if (!stopTurn.signal.aborted && run.crossing === undefined && run.turn?.error?.code === 'resume-failed' && req.resumeSessionId !== undefined) {
          // The harness forgot the session: start fresh in this same attempt, with the conversation replayed. The
          // fresh run is an attempt of its own in the ledger (its calls never collide with the refused one's).
          resumeFailed = clip(redact(run.turn.error.message), MAX_HARNESS_MESSAGE_CHARS);
          await finish(run, { status: 'resume-failed', outputUsed: false, output: '', error: resumeFailed });
          events.append('resume-failed', { message: resumeFailed });
          run = await driveHarness(spec, req, harness(), accountingFor(`${attemptId}:fresh`), (id) => id.startsWith(`${scheduling}:`), runs, await withHistory(), undefined, prompt);
        }
        const turn = run.turn!;
        const reportedSession = turn.sessionId ?? run.sessionId;
        // The session id travels in every later turn's request: one no real harness would report is not kept.
        const sessionId = reportedSession !== undefined && reportedSession.length > MAX_SESSION_ID_CHARS ? undefined : reportedSession;
        if (sessionId !== reportedSession) events.append('session-id-too-long', { characters: reportedSession!.length, limit: MAX_SESSION_ID_CHARS });
        if (ctx.cancellationSignal.aborted) {
          await finish(run, { status: 'cancelled', outputUsed: false, output: '', error: 'cancelled' });
          throw ctx.cancellationSignal.reason ?? new Error('turn cancelled');
        }
        if (run.crossing) {
          await finish(run, { status: 'budget-exhausted', outputUsed: false, output: '', error: run.crossing.reason });
          const spend = spent();
          return {
            ...resultOf(spend, run),
            ...(sessionId && sessionId !== req.resumeSessionId ? { externalSessionId: sessionId } : {}),
            budgetExhausted: { guardrail: run.crossing.guardrail, message: run.crossing.reason },
            step: { ok: false, problem: run.crossing.reason },
          };
        }
        if (turn.error) {
          const message = clip(redact(turn.error.message), MAX_HARNESS_MESSAGE_CHARS);
          if (turn.error.code === 'resume-failed') {
            await finish(run, { status: 'resume-failed', outputUsed: false, output: '', error: message });
            throw ApplicationFailure.nonRetryable(`the harness refused a fresh session: ${message}`, FailureTypes.ResumeFailed, { code: turn.error.code, spend: spent() });
          }
          await finish(run, { status: 'failed', outputUsed: false, output: '', error: message });
          throw turnFailure(turn.error, redact, spent());
        }
        // A turn that ran and reported no usage at all spent tokens nobody counted: its cost is blind.
        const usageMissing = turn.usageEvents === 0;
        const reply = redact(turn.text ?? '');
        const bytes = Buffer.byteLength(reply, 'utf8');
        const tooLarge = bytes > spec.harness.maxReplyBytes;
        const output = tooLarge ? `${reply.slice(0, KEPT_REPLY_CHARS)}\n[durable-harness: reply of ${bytes} bytes refused at the limit of ${spec.harness.maxReplyBytes}; only its opening is kept]` : reply;
        await finish(run, { status: 'succeeded', outputUsed: true, output, usageMissing });
        // Requests of this turn still pending came from an earlier attempt whose harness no longer asks them.
        // Nobody waits for them and the run's end expires them anyway, so this never holds up the turn.
        events.write(() => deps.ledger.expireApprovals(req.workflowId, 'turn ended without asking it again', req.turn, runId));
        if (sessionId) events.write(() => deps.ledger.setExternalSessionId(req.workflowId, sessionId, runId));
        // The session id only when it changed: a steady resumed session costs no bytes of history per turn.
        const result = {
          ...resultOf(spent(usageMissing), run),
          ...(sessionId && sessionId !== req.resumeSessionId ? { externalSessionId: sessionId } : {}),
          ...(resumeFailed !== undefined ? { resumeFailed } : {}),
          ...(permissionsOverCap ? { permissionRequestsOverCap: permissionsOverCap } : {}),
        };
        if (tooLarge) {
          const problem = replyTooLargeProblem(bytes, spec.harness.maxReplyBytes);
          await waitForLedger(() => deps.ledger.recordStep({ workflowId: req.workflowId, seq: req.envelopeSeq, turn: req.turn, type: 'reply-too-large', payload: { bytes, limit: spec.harness.maxReplyBytes } }));
          events.append('reply-too-large', { bytes, limit: spec.harness.maxReplyBytes });
          ctx.log.warn(`turn ${req.turn} of ${req.workflowId}: ${problem}`);
          return { ...result, step: { ok: false, problem, tooLarge: true } };
        }
        const validation = await validateStep({ workflowId: req.workflowId, turn: req.turn, seq: req.envelopeSeq, text: reply, specHash: req.specHash }, redact);
        if (!validation.ok) return { ...result, step: { ok: false, problem: clip(validation.problem, MAX_TURN_PROBLEM_CHARS) } };
        return { ...result, step: { ok: true, view: await viewOf(validation, spec.envelopeRules) } };
      } catch (err) {
        // Anything else that ended the attempt (a sandbox error, a throw above) still closes its prompt runs.
        const message = redact(err instanceof Error ? err.message : String(err));
        for (const r of runs) {
          if (!r.finished && r.accounting.begun) {
            await finish(r, { status: ctx.cancellationSignal.aborted ? 'cancelled' : 'failed', outputUsed: false, output: '', error: message }).catch(() => undefined);
          }
        }
        if (err instanceof ApplicationFailure || !runs.some((r) => r.accounting.begun)) throw redactFailure(err, redact);
        // Attach what the attempt spent, so the workflow can count it without reading the ledger.
        throw ApplicationFailure.retryable(message, (err as { type?: string }).type ?? (err instanceof Error ? err.name : 'Error'), { spend: spent() });
      } finally {
        ctx.cancellationSignal.removeEventListener('abort', onCancel);
        clearTimeout(giveUp);
        clearInterval(timer);
        // Every descendant of the turn dies with it, also those that left its process group — unless Temporal
        // already gave this turn to a newer attempt (timed out / no longer known), whose processes those now are.
        if (handle && !superseded(ctx.cancellationSignal)) await handle.killLeftovers().catch(() => undefined);
        await handle?.release().catch(() => undefined);
        // Progress is not accounting: give its writes a moment, then let them go.
        await events.close(2000);
      }
    },

    recordPromptRun,
    validateStep,
    executeAction,
    ...approvalActivities(deps.ledger),
    ...decisionActivities({ ledger: deps.ledger, operators: deps.operators, decisionMode: deps.decisionMode }),

    /**
     * Compensation: ends the sandbox (unless borrowed from a parent) and closes the ledger row. Idempotent; runs on
     * every exit path. With `onlyOnHost` (a run pinned to a host, tried as a local activity first) it does nothing
     * unless this worker is that host, and says so: the workflow then ends the session on the host queue.
     */
    async endSession(input: { workflowId: string; sandbox?: SandboxRef; releaseSandbox: boolean; status: RunOutcome; result: AgentRunResult; onlyOnHost?: string }): Promise<EndSessionOutcome> {
      if (input.onlyOnHost !== undefined && input.onlyOnHost !== deps.hostQueue) return { elsewhere: true };
      if (input.sandbox && input.releaseSandbox) await sandboxCall(() => provider(input.sandbox!.provider).end(input.sandbox!));
      // The next run of a shared workspace may start (workspace-claim.ts); idempotent.
      await waitForLedger(() => deps.ledger.releaseWorkspacesOf(input.workflowId));
      // Its effect happens once: a re-run (a retried attempt, a replayed workflow task after a crash) finds the run
      // already closed and writes nothing again.
      const run = await waitForLedger(() => deps.ledger.getRun(input.workflowId));
      if (run?.finishedAt !== undefined) return { elsewhere: false };
      await waitForLedger(() => deps.ledger.appendEvent(input.workflowId, input.result.iterations, 'end', { status: input.status, reason: input.result.reason }));
      await waitForLedger(() => deps.ledger.expireApprovals(input.workflowId, `run ${input.status}`));
      await waitForLedger(() => deps.ledger.finishRun(input.workflowId, input.status satisfies RunStatus, input.result));
      return { elsewhere: false };
    },
  };

  type StartSessionInput = Parameters<typeof activities.startSession>[0];
  const runTurn = activities.runTurn;
  return {
    ...activities,
    /**
     * A run's start in one local-activity round (workflow version 2): resolves the agent, then starts its session.
     * When the session fails to start after the agent resolved, the failure carries the policy (`OpenRunFailure`), so
     * the run still ends the record and whatever part of the session began.
     */
    async openRun(input: Omit<StartSessionInput, 'specHash'> & { agent: string; budget?: InheritedBudget }): Promise<{ policy: RunPolicy; sandbox: SandboxRef; task: TextRef; hostIdle?: true }> {
      const { agent, budget, ...start } = input;
      const policy = await activities.resolveAgent({ agent, budget });
      try {
        return { policy, ...(await activities.startSession({ ...start, specHash: policy.specHash })) };
      } catch (err) {
        const failure = err instanceof ApplicationFailure ? err : undefined;
        throw ApplicationFailure.create({
          message: err instanceof Error ? err.message : String(err),
          type: failure?.type ?? (err instanceof Error ? err.name : 'Error'),
          nonRetryable: failure?.nonRetryable ?? false,
          details: [{ policy } satisfies OpenRunFailure],
          cause: err instanceof Error ? err : undefined,
        });
      }
    },
    async runTurn(request: TurnRequest): Promise<TurnResult> {
      turnsRunning++;
      try {
        const result = await runTurn(request);
        return hostIdle(request.sandbox, 1) ? { ...result, hostIdle: true } : result;
      } finally {
        turnsRunning--;
      }
    },
  };

  /**
   * Starts a fresh adapter for one harness run (resumed or not), opens its prompt run and records every usage event
   * as it streams, and folds the stream. Always ends the adapter. The run is added to `runs` before the harness
   * starts, so whatever ends the attempt can still close its prompt run.
   */
  async function driveHarness(
    spec: FrozenSpec,
    req: RunTurn,
    with_: TurnHarness,
    accounting: TurnAccounting,
    sameScheduling: (attemptId: string) => boolean,
    runs: HarnessRun[],
    input: string,
    resumeSessionId: string | undefined,
    /** The turn's own message, as the ledger keeps it (a replay is rebuilt from these rows, never stored again). */
    message: string,
  ): Promise<HarnessRun> {
    const { handle, secretEnv, gate, progress, redact, signal, events } = with_;
    const driver = findDriver(deps.adapters, spec.harness.driverClass);
    const run: HarnessRun = { accounting, startedAt: Date.now(), finished: false, usageReported: false, resumed: false };
    runs.push(run);
    try {
      // The attempt's prompt run first: an unresolvable id fails before any token is spent, and while the ledger
      // cannot be written the turn waits (heartbeating) instead of spending tokens nobody would record.
      progress.lastEvent = 'opening the prompt run';
      try {
        await accounting.begin(
          { promptId: spec.agent.promptId, vendorId: spec.harness.vendor, modelId: `${spec.harness.vendor}/${spec.harness.model}`, input: redact(message) },
          sameScheduling,
        );
      } catch (err) {
        if (err instanceof UnresolvedAccountingError) throw ApplicationFailure.nonRetryable(err.message, FailureTypes.AccountingUnresolved);
        if (signal.aborted) throw signal.reason ?? err;
        throw err;
      }
      // A harness without a system prompt gets the contract in its input instead (on a fresh session).
      const prompt = spec.harness.capabilities.systemPrompt || resumeSessionId !== undefined ? input : promptWithContract(spec.agent.systemPrompt, input);
      const turn = runDriverTurn(
        driver,
        {
          runId: req.workflowId,
          harnessName: spec.harness.name,
          executable: spec.harness.executable,
          baseArgs: spec.harness.args,
          model: spec.harness.model,
          workspacePath: req.sandbox.workspacePath,
          hostWorkspacePath: req.sandbox.hostWorkspacePath,
          env: { ...spec.harness.env, ...secretEnv },
          resumeSessionId,
          baseUrl: spec.harness.baseUrl,
          timeoutMs: spec.harness.turnTimeoutMs,
          maxReplyBytes: spec.harness.maxReplyBytes,
          // A catalog that declares `capabilities.sessionFork` asks the driver to fork resumed sessions.
          settings: spec.harness.capabilities.sessionFork !== undefined ? { forkSessions: spec.harness.capabilities.sessionFork, ...spec.harness.settings } : (spec.harness.settings ?? {}),
          // The driver's state between turns lives in the ledger, out of the harness's reach.
          state: {
            get: (key) => waitForLedger(() => deps.ledger.getHarnessState(req.workflowId, key)),
            set: (key, value) => waitForLedger(() => deps.ledger.setHarnessState(req.workflowId, key, value)),
          },
          prompt,
          turn: req.turn,
          attemptId: accounting.attemptId,
          ...(spec.harness.capabilities.systemPrompt ? { systemPrompt: spec.agent.systemPrompt } : {}),
          posture: spec.agent.permissions.posture,
        },
        { executor: handle.executor, fs: handle.fs, gate, signal },
      );
      // Durable: the harness may forget it (it re-reports what was never acknowledged).
      accounting.onRecorded = (ack) => turn.acknowledge(ack);
      // Every event is redacted as it leaves the adapter: nothing below sees a harness string unredacted (the
      // gate sees a permission request as asked, to decide on it, and stores it redacted).
      run.turn = await collectTurn(redactStream(turn, redact), (event) => {
        progress.events += 1;
        // A usage report is not something the harness does: it keeps the last thing it did as lastEvent.
        if (event.type !== 'usage' || progress.lastEvent === 'starting') progress.lastEvent = describeEvent(event, redact);
        if (event.type === 'usage') {
          run.usageReported = true;
          const cost = event.costUsd !== undefined ? { costUsd: event.costUsd } : {};
          const crossed = event.recovered
            ? accounting.recordRecovered({ usage: event.usage, ...cost, recovered: event.recovered })
            : accounting.recordUsage({ usage: event.usage, ...cost, ...(event.call !== undefined ? { call: event.call } : {}) });
          const total = spendOf([run], 0);
          progress.tokens = totalTokens(total.usage);
          progress.costUsd = total.costUsd;
          if (crossed && !run.crossing) {
            run.crossing = crossed;
            progress.lastEvent = crossed.reason;
            with_.stop(new StopAtOnce(crossed.reason));
          }
        }
        const flooded = with_.overCap() && (event.type === 'permission-request' || event.type === 'permission-decision');
        if (event.type === 'text' || flooded) return;
        // What the operator must see is always written; the rest of the stream within the per-turn rate cap.
        if (alwaysWritten.has(event.type)) events.append(event.type, clipEvent(event));
        else events.progress(event.type, clipEvent(event));
        if (event.type === 'output-sampled') Context.current().log.warn(`turn ${req.turn} of ${req.workflowId}: ${sampledSummary(event)}`);
        if (event.type === 'line-too-large' && !run.oversizedLogged) {
          run.oversizedLogged = true;
          Context.current().log.warn(`turn ${req.turn} of ${req.workflowId}: the harness printed a line of ${event.bytes} bytes, over the limit of ${event.limit}; it was not read`);
        }
      });
      // The session the turn ran in, from its terminal event (redacted with the stream).
      run.sessionId = run.turn.sessionId ?? optional(resumeSessionId, redact);
      run.model = run.turn.model;
      run.resumed = run.turn.resumed;
      return run;
    } finally {
      // Nothing to end: the engine killed the turn's process when the stream ended.
    }
  }
}

/**
 * Events of the harness's stream written whatever the rate: the turn's end, the counts of what was not written, and
 * permission events (bounded by the permission cap per turn).
 */
const alwaysWritten = new Set<HarnessEvent['type']>(['turn-complete', 'session-error', 'output-sampled', 'permission-request', 'permission-decision']);

/** An `output-sampled` event as the operator's log line. */
function sampledSummary(e: Extract<HarnessEvent, { type: 'output-sampled' }>): string {
  const parts = [];
  if (e.unknownLines > e.unknownReported) parts.push(`${e.unknownLines} lines the runtime does not understand (the first ${e.unknownReported} recorded as events)`);
  if (e.tooLargeLines > e.tooLargeReported) parts.push(`${e.tooLargeLines} lines over the line limit (the first ${e.tooLargeReported} recorded)`);
  return `the harness printed ${parts.join(' and ')}; the rest were only counted`;
}

/** One harness run of a turn attempt (two when a forgotten session is replaced by a fresh one) and its accounting. */
interface HarnessRun {
  readonly accounting: TurnAccounting;
  /** The operator was told (once) that this run printed a line too large to read. */
  oversizedLogged?: boolean;
  readonly startedAt: number;
  finished: boolean;
  usageReported: boolean;
  turn?: Awaited<ReturnType<typeof collectTurn>>;
  sessionId?: string;
  model?: string;
  resumed: boolean;
  crossing?: BudgetCrossing;
}

/** What the attempt's harness runs spent together, priced by the one cost rule (see TurnAccounting.spend). */
function spendOf(runs: readonly HarnessRun[], attempt: number, usageMissing = false): TurnSpend {
  const spends = runs.map((r, i) => r.accounting.spend(usageMissing && i === runs.length - 1));
  const harness = spends.flatMap((s) => (s.harnessCostUsd === undefined ? [] : [s.harnessCostUsd]));
  const last = runs.at(-1);
  return {
    usage: spends.reduce((u, s) => addUsage(u, s.usage), noUsage),
    costUsd: spends.reduce((n, s) => n + s.costUsd, 0),
    costSource: spends.some((s) => s.costBlind) ? 'unknown' : (spends.at(-1)?.costSource ?? 'unknown'),
    ...(harness.length > 0 ? { harnessCostUsd: harness.reduce((a, b) => a + b, 0) } : {}),
    costMismatch: spends.some((s) => s.costMismatch),
    costBlind: spends.some((s) => s.costBlind),
    ...(last ? { attemptId: last.accounting.attemptId } : {}),
    attempt,
    calls: spends.reduce((n, s) => n + s.calls, 0),
  };
}

/**
 * Refuses a pinned turn that reached a worker other than its host (`onlyOnHost`) without running anything, with
 * what the earlier attempts of its scheduling spent (retries land anywhere on the workflow's queue) for the
 * workflow to count before it sends the turn to the host queue.
 */
async function turnElsewhere(request: TurnRequest, deps: ActivityDeps): Promise<never> {
  const info = activityInfo();
  const execution = info.workflowExecution;
  const scheduling = execution ? `${execution.runId}:${info.activityId}:${request.turn}` : '';
  const earlier = execution && info.attempt > 1 ? await waitForLedger(() => earlierSpend(deps.ledger, execution.workflowId, execution.runId, request.turn, scheduling, `${scheduling}:${info.attempt}`)) : undefined;
  throw ApplicationFailure.create({
    type: FailureTypes.TurnElsewhere,
    nonRetryable: true,
    message: `turn ${request.turn} belongs to the worker of host queue "${request.sandbox.hostQueue ?? '?'}", not to this one (${deps.hostQueue ?? 'no host queue'}): it goes to its host queue`,
    details: [{ spend: withEarlier(spendOf([], info.attempt), earlier) }],
  });
}

/** The spend of a turn's earlier attempts, from their ledger rows. */
interface EarlierSpend {
  readonly usage: Usage;
  readonly costUsd: number;
  readonly costBlind: boolean;
}

/** What the attempts of this scheduling before `attemptId` spent, as their ledger rows say; none when there are none. */
async function earlierSpend(ledger: Ledger, workflowId: string, runId: string, turn: number, scheduling: string, attemptId: string): Promise<EarlierSpend | undefined> {
  const rows = (await ledger.listPromptRuns(workflowId, runId)).filter(
    (r) => r.turn === turn && r.attemptId.startsWith(`${scheduling}:`) && r.attemptId !== attemptId && !r.attemptId.startsWith(`${attemptId}:`),
  );
  if (rows.length === 0) return undefined;
  return { usage: rows.reduce((u, r) => addUsage(u, r.usage), noUsage), costUsd: rows.reduce((n, r) => n + r.costUsd, 0), costBlind: rows.some((r) => r.costBlind) };
}

/** The attempt's spend plus its earlier attempts'. */
function withEarlier(spend: TurnSpend, earlier: EarlierSpend | undefined): TurnSpend {
  if (!earlier) return spend;
  const costBlind = spend.costBlind === true || earlier.costBlind;
  return { ...spend, usage: addUsage(spend.usage, earlier.usage), costUsd: spend.costUsd + earlier.costUsd, ...(costBlind ? { costBlind: true, costSource: 'unknown' as const } : {}) };
}

/** The accounting part of a turn's result, as the workflow keeps it (small: flags only when set). */
function resultOf(spend: TurnSpend, run: HarnessRun): Pick<TurnResult, 'usage' | 'costUsd' | 'costSource' | 'usageReported' | 'costBlind'> {
  return { usage: spend.usage, costUsd: spend.costUsd, costSource: spend.costSource, usageReported: run.usageReported, ...(spend.costBlind ? { costBlind: true } : {}) };
}

/** The heartbeat details of a running turn. */
interface TurnProgress {
  turn: number;
  attempt: number;
  lastEvent: string;
  tokens: number;
  costUsd: number;
  events: number;
  /** `ok`, or why the turn waits for the ledger (shown by `status` as "ledger NOT WRITABLE"). */
  ledger: string;
  pendingApproval?: string;
}

/** What driving the harness needs besides the spec and the request. */
interface TurnHarness {
  readonly handle: SandboxHandle;
  readonly secretEnv: Readonly<Record<string, string>>;
  readonly gate: ReturnType<typeof createPermissionGate>;
  readonly progress: TurnProgress;
  readonly redact: Redactor;
  readonly signal: AbortSignal;
  readonly events: ProgressEvents;
  readonly ledgerState: (err: Error | undefined) => void;
  /** Stops the harness (a budget crossed mid-turn). */
  readonly stop: (reason: Error) => void;
  /** Whether the harness asked past the permission cap: its requests' events are then not written one by one. */
  readonly overCap: () => boolean;
}

/** A turn request with the run it belongs to. */
type RunTurn = Omit<TurnRequest, 'sandbox'> & { readonly sandbox: SandboxRef; readonly workflowId: string; readonly runId: string };

/** The ledger's live events keep a turn's final text short: the whole reply is in its prompt-run row. */
function clipEvent(event: HarnessEvent): HarnessEvent {
  return event.type === 'turn-complete' && event.text.length > 4096 ? { ...event, text: clip(event.text, 4096) } : event;
}

/** Maps a missing blob to a permanent failure: retrying cannot bring it back. */
async function blobCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof BlobMissingError) throw ApplicationFailure.nonRetryable(err.message, FailureTypes.BlobMissing);
    throw err;
  }
}

function describeEvent(event: HarnessEvent, redact: (s: string) => string): string {
  switch (event.type) {
    case 'activity':
      return redact(event.description).slice(0, 200);
    case 'text':
      return 'writing';
    case 'usage':
      return `usage ${totalTokens(event.usage)} tokens`;
    case 'session':
      return `session ${event.sessionId}`;
    case 'permission-request':
      return redact(`asks permission: ${event.tool} ${event.title}`).slice(0, 200);
    case 'permission-decision':
      return redact(`${event.decision === 'allow' ? 'allowed' : 'denied'} ${event.tool} (${event.decidedBy})`).slice(0, 200);
    case 'turn-complete':
      return 'turn complete';
    case 'line-too-large':
      return `a line of ${event.bytes} bytes, over the limit of ${event.limit}, not read`;
    case 'session-error':
      return `error: ${redact(event.message).slice(0, 200)}`;
    default:
      return event.type;
  }
}

/** The worker's client (absent in a mock activity environment). */
function workerClient(ctx: Context): Client | undefined {
  try {
    return ctx.client;
  } catch {
    return undefined;
  }
}

/** How long a suspicious attempt waits for the server's answer to its first heartbeat. */
const staleProbeMs = 1000;

/**
 * An attempt that starts more than its heartbeat timeout after it was scheduled may have been handed to this worker
 * while it was frozen (SIGSTOP, swapped out) and timed out meanwhile; the server has given the turn to a newer
 * attempt. It asks with one heartbeat first: a stale attempt is cancelled (timed out / not found) and stops here,
 * before it kills the newer attempt's processes as leftovers or runs a second harness in the workspace. Its end is
 * not another attempt: the server counted the timeout already and ignores what it reports. Attempts that started
 * in time (nearly all) skip the probe.
 */
async function stopIfStale(turn: number): Promise<void> {
  const ctx = Context.current();
  const { heartbeatTimeoutMs, currentAttemptScheduledTimestampMs, attempt } = ctx.info;
  if (!heartbeatTimeoutMs || Date.now() - currentAttemptScheduledTimestampMs < heartbeatTimeoutMs) return;
  const probe: TurnProgress = { turn, attempt, lastEvent: 'checking that this attempt is still current', tokens: 0, costUsd: 0, events: 0, ledger: 'ok' };
  ctx.heartbeat(probe);
  await ctx.sleep(staleProbeMs).catch(() => undefined);
  if (superseded(ctx.cancellationSignal)) {
    ctx.log.warn('a stale turn attempt (handed to this worker while it did not run, timed out since) stops without touching the sandbox', { turn, attempt });
    throw ctx.cancellationSignal.reason;
  }
}

/** Whether this attempt was cancelled because Temporal handed the activity to another attempt. */
function superseded(signal: AbortSignal): boolean {
  const reason = signal.aborted ? (signal.reason as { message?: unknown } | undefined)?.message : undefined;
  return reason === 'TIMED_OUT' || reason === 'NOT_FOUND' || reason === 'RESET';
}

/** A harness-reported value that did not come through the event stream, redacted. */
function optional(value: string | undefined, redact: Redactor): string | undefined {
  return value === undefined ? undefined : redact(value);
}

function turnFailure(
  error: { code: string; message: string; exitCode?: number | null; stderrTail?: string },
  redact: (s: string) => string,
  spend: TurnSpend,
): ApplicationFailure {
  const stderr = error.stderrTail ? `\n${redact(error.stderrTail).slice(-2000)}` : '';
  // The message goes into history (the failure) and the run's state: a harness's error line is bounded.
  const message = clip(redact(error.message), MAX_HARNESS_MESSAGE_CHARS);
  // The CLI base class words a missing executable the same way locally (ENOENT) and in a container (exit 127).
  if (error.code === 'process-exit' && /could not start: executable .* was not found/.test(error.message)) {
    return ApplicationFailure.nonRetryable(message, FailureTypes.HarnessBinaryMissing, { code: error.code, spend });
  }
  return ApplicationFailure.retryable(`turn failed (${error.code}): ${message}${stderr}`, FailureTypes.TurnFailed, { code: error.code, exitCode: error.exitCode ?? null, spend });
}

/**
 * Retries a short activity's ledger write while the ledger cannot take it (faults, I/O), until shortly before the
 * activity's timeout; anything else (a bug, a constraint) fails at once.
 */
async function waitForLedger<T>(write: () => Promise<T>): Promise<T> {
  let context: Context | undefined;
  try {
    context = Context.current();
  } catch {
    context = undefined; // called outside an activity: no deadline to respect
  }
  const info = context?.info;
  const deadline = info ? info.currentAttemptScheduledTimestampMs + info.startToCloseTimeoutMs - 2000 : Date.now() + 60_000;
  let delay = 100;
  for (;;) {
    try {
      return await write();
    } catch (err) {
      if (!isRetryable(err) || Date.now() + delay > deadline || context?.cancellationSignal.aborted) throw err;
      context?.log.warn('ledger write failed; retrying', { error: (err as Error).message });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 2000);
    }
  }
}

/** Runs a catalog lookup and turns its error into a non-retryable failure with a stable type. */
function permanent<T>(fn: () => T, type: string): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof ApplicationFailure) throw err;
    throw ApplicationFailure.nonRetryable(err instanceof Error ? err.message : String(err), (err as { code?: string }).code ?? type);
  }
}

/** Maps sandbox-provider errors with a stable `code` to Temporal failures; unknown errors stay retryable. */
async function sandboxCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const message = err instanceof Error ? err.message : String(err);
    if (typeof code === 'string' && code in FailureTypes) {
      const retryable = code === FailureTypes.DockerUnavailable || code === FailureTypes.SandboxContainerGone;
      throw retryable ? ApplicationFailure.retryable(message, code) : ApplicationFailure.nonRetryable(message, code);
    }
    throw err;
  }
}

