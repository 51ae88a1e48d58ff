/**
 * The activities of `agentRun`, made by a factory that receives their dependencies.
 * Adapters and sandbox handles live only inside an activity; between activities a session is a `SandboxRef`,
 * the agent a frozen spec's hash, and large texts references into the blob store.
 */
import { ApplicationFailure, Context, activityInfo, heartbeat } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import type { ActionRegistry } from '../actions/index.js';
import type { AdapterRegistry } from '../adapters/registry.js';
import { UnknownDriverError } from '../adapters/registry.js';
import { collectTurn } from '../adapters/fold.js';
import type { HarnessEvent, Usage } from '../adapters/types.js';
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
import type {
  ActionOutcome,
  AgentRunResult,
  ConversationEntry,
  InheritedBudget,
  RunOutcome,
  StepValidation,
  StepView,
  TurnRequest,
  TurnResult,
} from '../workflows/types.js';
import { expandSandbox } from '../workflows/types.js';
import { totalTokens } from '../workflows/usage.js';
import { FailureTypes } from './failure-types.js';
import { announcingBroker, approvalActivities, attemptDeadlineMs, runAnnouncer } from './approvals.js';
import { turnPriceUsd } from './pricing.js';
import { reportTurnIdentity } from '../observability/turn-telemetry.js';
import { harnessRedactor, redactDeep, redactFailure, redactStream, type Redactor } from './redaction.js';

/** Texts longer than this (characters) travel through workflow history by reference. */
export const DEFAULT_INLINE_TEXT_LIMIT = 16 * 1024;
/** How much of a refused (too large) reply the ledger keeps. */
const KEPT_REPLY_CHARS = 64 * 1024;

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
  const checked = (value: string) => claimCheck(blobs, value, inlineTextLimit);

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
      throw ApplicationFailure.nonRetryable(new UnknownDriverError(harness.driverClass, deps.adapters.driverClasses()).message, FailureTypes.UnknownDriver);
    }
    if (agent.sandbox.workspaceScope !== 'parent' && provider(agent.sandbox.provider).enforces(agent.sandbox.networkPolicy) === 'refused') {
      throw ApplicationFailure.nonRetryable(
        `Sandbox provider "${agent.sandbox.provider}" cannot enforce network policy "${agent.sandbox.networkPolicy}" for agent "${agent.name}". Use the docker provider, or choose another policy.`,
        FailureTypes.SandboxPolicyRefused,
      );
    }
    // Fail at resolution, not three attempts later: a harness whose key cannot be resolved never works.
    permanent(() => resolveCredentials({ agent, harness, store: deps.credentials, env }), FailureTypes.CredentialMissing);
    const spec = permanent(() => freezeSpec(catalog, agentName, deps.actions, deps.adapters.create(harness.driverClass).capabilities), FailureTypes.UnknownAgent);
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

  /** Writes a turn's accounting row; a retried call never adds a second one. */
  async function recordPromptRun(input: {
    workflowId: string;
    turn: number;
    promptId: string;
    vendor: string;
    model: string;
    reportedModel?: string;
    usage: Usage;
    costUsd: number;
    costSource: 'harness' | 'price-table' | 'unknown';
    externalSessionId?: string;
    resumed: boolean;
    durationMs: number;
    input: string;
    output: string;
  }): Promise<{ inserted: boolean }> {
    try {
      return await deps.ledger.recordPromptRun({
        workflowId: input.workflowId,
        turn: input.turn,
        promptId: input.promptId,
        vendorId: input.vendor,
        modelId: `${input.vendor}/${input.model}`,
        reportedModel: input.reportedModel,
        usage: input.usage,
        costUsd: input.costUsd,
        costSource: input.costSource,
        externalSessionId: input.externalSessionId,
        resumed: input.resumed,
        durationMs: input.durationMs,
        input: input.input,
        output: input.output,
      });
    } catch (err) {
      if (err instanceof UnresolvedAccountingError) throw ApplicationFailure.nonRetryable(err.message, FailureTypes.AccountingUnresolved);
      throw err;
    }
  }

  /** Parses the envelope against the frozen rules and records the step: the step and per-call parameter problems, or the problem. */
  async function validateStep(input: { workflowId: string; turn: number; seq: number; text: string; specHash: string }): Promise<StepValidation> {
    const spec = await loadSpec(input.specHash);
    const parsed = parseEnvelope(input.text, spec.envelopeRules);
    await deps.ledger.recordStep({
      workflowId: input.workflowId,
      seq: input.seq,
      turn: input.turn,
      type: parsed.ok ? `step:${parsed.step.step}` : 'malformed-envelope',
      payload: parsed.ok ? { step: parsed.step, actionErrors: parsed.actionErrors } : { problem: parsed.problem },
    });
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
    const earlier = await deps.ledger.getStep(input.workflowId, input.seq);
    const interrupted: ActionOutcome = { ok: false, error: `action "${input.call.name}" was started by an earlier, interrupted attempt of this turn; its outcome is unknown and it was not run again` };
    if (earlier) return (earlier.payload as { outcome?: ActionOutcome }).outcome ?? interrupted;
    const call = redactDeep(input.call, redact);
    const { inserted } = await deps.ledger.recordStep({ workflowId: input.workflowId, seq: input.seq, turn: input.turn, type, payload: { call } });
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
    await deps.ledger.completeStep(input.workflowId, input.seq, { call, outcome });
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
        const envelope = await deps.ledger.getStep(req.workflowId, input.envelopeSeq);
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

  /** The conversation before `turn`, from the ledger's prompt runs: what a fresh session is given to continue. */
  async function conversationBefore(workflowId: string, turn: number): Promise<ConversationEntry[]> {
    const rows = (await deps.ledger.listPromptRuns(workflowId)).filter((r) => r.turn < turn);
    return rows.flatMap((r): ConversationEntry[] => [{ role: 'user', text: r.input }, { role: 'assistant', text: r.output }]);
  }

  /** The step as the workflow keeps it: large texts by reference, parameters left in the ledger. */
  async function viewOf(validation: Extract<StepValidation, { ok: true }>): Promise<StepView> {
    const step = validation.step;
    switch (step.step) {
      case 'success':
        return { step: 'success', result: await checked(step.result) };
      case 'failed':
        return { step: 'failed', reason: await checked(step.reason) };
      case 'chat':
        return { step: 'chat', message: await checked(step.message) };
      case 'sub-agent':
        return { step: 'sub-agent', agent: step.agent, message: await checked(step.message), terminateAfter: step.terminateAfter };
      case 'actions':
        return {
          step: 'actions',
          calls: step.actions.map((c, i) => ({ name: c.name, ...(validation.actionProblems[i] ? { problem: clip(validation.actionProblems[i]!, 2000) } : {}) })),
          ...(step.message !== undefined ? { message: clip(step.message, 500) } : {}),
        };
    }
  }

  return {
    /** Resolves the agent from the catalog, freezes its spec into the ledger, and returns what the workflow keeps. */
    async resolveAgent(input: { agent: string; budget?: InheritedBudget }): Promise<RunPolicy> {
      const spec = freeze(input.agent);
      const hash = await specs.save(spec);
      // The accounting ids of this spec resolve in the ledger for as long as the run lives, whatever the catalog does.
      await deps.ledger.syncCatalog({
        vendors: [{ id: spec.harness.vendor, name: spec.harness.vendor }],
        models: [{ id: `${spec.harness.vendor}/${spec.harness.model}`, vendorId: spec.harness.vendor, name: spec.harness.model }],
        prompts: [{ id: spec.agent.promptId, name: spec.agent.name, text: spec.agent.systemPrompt }],
      });
      return policyOf(spec, hash, { budget: input.budget, inlineTextLimit });
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
    }): Promise<{ sandbox: SandboxRef; task: TextRef }> {
      const spec = await loadSpec(input.specHash);
      const task = isBlobRef(input.task) ? input.task : await checked(input.task);
      await deps.ledger.startRun({
        workflowId: input.workflowId,
        runId: input.runId,
        agent: spec.agent.name,
        harness: spec.harness.name,
        tenantId: input.identity.tenantId,
        userId: input.identity.userId,
        task: isBlobRef(input.task) ? previewOf(input.task) : input.task,
        parentWorkflowId: input.parentWorkflowId,
      });
      // What the posture becomes on this harness, for operators reading the run's record.
      const policy = spec.agent.permissions;
      const report = deps.adapters.has(spec.harness.driverClass) ? deps.adapters.create(spec.harness.driverClass).applyPermissionPolicy(policy.posture) : undefined;
      await deps.ledger.appendEvent(input.workflowId, 0, 'permissions', {
        posture: policy.posture,
        rules: { allow: policy.allow.length, deny: policy.deny.length, ask: policy.ask.length },
        gated: policyIsInteractive(policy),
        enforced: spec.agent.permissionsEnforced,
        note: !spec.agent.permissionsEnforced ? `advisory: harness "${spec.harness.name}" cannot ask before a tool runs` : report?.note,
      });
      if (spec.agent.sandbox.workspaceScope === 'parent') {
        if (!input.parentSandbox) {
          throw ApplicationFailure.nonRetryable(`Agent "${spec.agent.name}" has workspaceScope "parent", which only a sub-agent can use: run it as another agent's sub-agent, or give it another scope.`, FailureTypes.WorkspaceScopeInvalid);
        }
        return { sandbox: input.parentSandbox, task };
      }
      const sandbox = await startSandbox(spec, input);
      return { sandbox, task };
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

    /** Stores a large text (a chat reply) and returns its reference. */
    async storeText(input: { text: string }): Promise<TextRef> {
      return checked(input.text);
    },

    /**
     * One turn, inside one attempt: run the actions the workflow approved → drive the harness (heartbeating; dies
     * with the turn when cancelled) → write the accounting row → validate the envelope → return a small result.
     */
    async runTurn(request: TurnRequest): Promise<TurnResult> {
      const spec = await loadSpec(request.specHash);
      const { name: harnessName, driverClass, vendor, model } = spec.harness;
      reportTurnIdentity({ agent: spec.agent.name, harness: harnessName, driverClass, vendor, model });
      const ctx = Context.current();
      const info = activityInfo();
      if (!info.workflowExecution) throw ApplicationFailure.nonRetryable('runTurn runs only as an activity of an agentRun workflow', FailureTypes.TurnFailed);
      const req: RunTurn = { ...request, sandbox: expandSandbox(request.sandbox), workflowId: info.workflowExecution.workflowId };
      const credentials = permanent(
        () => resolveCredentials({ agent: { name: spec.agent.name, credentials: [...spec.agent.credentials] }, harness: spec.harness, store: deps.credentials, env, log: ctx.log }),
        FailureTypes.CredentialMissing,
      );
      const redact = redactorFor(credentials.secrets);
      const handle: SandboxHandle = await sandboxCall(() => provider(req.sandbox.provider).attach(req.sandbox));
      const progress: TurnProgress = { turn: req.turn, attempt: info.attempt, lastEvent: 'starting', tokens: 0, events: 0 };
      const beat = () => heartbeat({ ...progress });
      const timer = setInterval(beat, deps.heartbeatIntervalMs ?? 250);
      const gate = createPermissionGate({
        ledger: deps.ledger,
        workflowId: req.workflowId,
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
      });
      try {
        if (info.attempt > 1) {
          // A crashed or timed-out earlier attempt may have left its process running: never run two at once.
          await handle.killLeftovers();
          await deps.ledger.appendEvent(req.workflowId, req.turn, 'retry', { attempt: info.attempt });
        }
        const prompt = await composeInput(req, handle.fs, redact);
        beat();
        const withHistory = async () => (req.turn > 1 ? formatReplay(await conversationBefore(req.workflowId, req.turn), prompt) : prompt);
        const started = Date.now();
        let resumeFailed: string | undefined;
        const harness = { handle, secretEnv: credentials.env, gate, progress, redact, signal: ctx.cancellationSignal };
        let run = await driveHarness(spec, req, harness, req.replay ? await withHistory() : prompt, req.resumeSessionId);
        if (run.turn.error?.code === 'resume-failed' && req.resumeSessionId !== undefined) {
          // The harness forgot the session: start fresh in this same attempt, with the conversation replayed.
          resumeFailed = redact(run.turn.error.message);
          await deps.ledger.appendEvent(req.workflowId, req.turn, 'resume-failed', { message: resumeFailed });
          run = await driveHarness(spec, req, harness, await withHistory(), undefined);
        }
        const turn = run.turn;
        if (turn.error) {
          if (turn.error.code === 'resume-failed') throw ApplicationFailure.nonRetryable(`the harness refused a fresh session: ${redact(turn.error.message)}`, FailureTypes.ResumeFailed);
          throw turnFailure(turn.error, redact);
        }
        // Requests of this turn still pending came from an earlier attempt whose harness no longer asks them.
        await deps.ledger.expireApprovals(req.workflowId, 'turn ended without asking it again', req.turn);
        const sessionId = turn.sessionId ?? run.sessionId;
        if (sessionId) await deps.ledger.setExternalSessionId(req.workflowId, sessionId);
        const priced = spec.harness.prices ? turnPriceUsd(spec.harness.prices, turn.usage) : undefined;
        const costSource = turn.costUsd !== undefined ? 'harness' : priced !== undefined ? 'price-table' : 'unknown';
        const costUsd = turn.costUsd ?? priced ?? 0;
        const reply = redact(turn.text ?? '');
        const bytes = Buffer.byteLength(reply, 'utf8');
        const tooLarge = bytes > spec.harness.maxReplyBytes;
        await recordPromptRun({
          workflowId: req.workflowId,
          turn: req.turn,
          promptId: spec.agent.promptId,
          vendor: spec.harness.vendor,
          model: spec.harness.model,
          reportedModel: turn.model ?? run.model,
          usage: turn.usage,
          costUsd,
          costSource,
          externalSessionId: sessionId,
          resumed: turn.resumed || run.resumed,
          durationMs: Date.now() - started,
          input: prompt,
          output: tooLarge ? `${reply.slice(0, KEPT_REPLY_CHARS)}\n[durable-harness: reply of ${bytes} bytes refused at the limit of ${spec.harness.maxReplyBytes}; only its opening is kept]` : reply,
        });
        // The session id only when it changed: a steady resumed session costs no bytes of history per turn.
        const usage = { usage: turn.usage, costUsd, costSource, usageReported: run.usageReported, ...(sessionId && sessionId !== req.resumeSessionId ? { externalSessionId: sessionId } : {}), ...(resumeFailed !== undefined ? { resumeFailed } : {}) } as const;
        if (tooLarge) {
          const problem = replyTooLargeProblem(bytes, spec.harness.maxReplyBytes);
          await deps.ledger.recordStep({ workflowId: req.workflowId, seq: req.envelopeSeq, turn: req.turn, type: 'reply-too-large', payload: { bytes, limit: spec.harness.maxReplyBytes } });
          await deps.ledger.appendEvent(req.workflowId, req.turn, 'reply-too-large', { bytes, limit: spec.harness.maxReplyBytes });
          ctx.log.warn(`turn ${req.turn} of ${req.workflowId}: ${problem}`);
          return { ...usage, step: { ok: false, problem, tooLarge: true } };
        }
        const validation = await validateStep({ workflowId: req.workflowId, turn: req.turn, seq: req.envelopeSeq, text: reply, specHash: req.specHash });
        if (!validation.ok) return { ...usage, step: { ok: false, problem: validation.problem } };
        return { ...usage, step: { ok: true, view: await viewOf(validation) } };
      } catch (err) {
        throw redactFailure(err, redact);
      } finally {
        clearInterval(timer);
        // Every descendant of the turn dies with it, also those that left its process group — unless Temporal
        // already gave this turn to a newer attempt (timed out / no longer known), whose processes those now are.
        if (!superseded(ctx.cancellationSignal)) await handle.killLeftovers().catch(() => undefined);
        await handle.release().catch(() => undefined);
      }
    },

    recordPromptRun,
    validateStep,
    executeAction,
    ...approvalActivities(deps.ledger),

    /** Compensation: ends the sandbox (unless borrowed from a parent) and closes the ledger row. Idempotent; runs on every exit path. */
    async endSession(input: { workflowId: string; sandbox?: SandboxRef; releaseSandbox: boolean; status: RunOutcome; result: AgentRunResult }): Promise<void> {
      if (input.sandbox && input.releaseSandbox) await sandboxCall(() => provider(input.sandbox!.provider).end(input.sandbox!));
      await deps.ledger.appendEvent(input.workflowId, input.result.iterations, 'end', { status: input.status, reason: input.result.reason });
      await deps.ledger.expireApprovals(input.workflowId, `run ${input.status}`);
      await deps.ledger.finishRun(input.workflowId, input.status satisfies RunStatus, input.result);
    },
  };

  /** Starts a fresh adapter for one harness run (resumed or not) and folds its stream. Always ends the adapter. */
  async function driveHarness(spec: FrozenSpec, req: RunTurn, with_: TurnHarness, input: string, resumeSessionId: string | undefined) {
    const { handle, secretEnv, gate, progress, redact, signal } = with_;
    const adapter = deps.adapters.create(spec.harness.driverClass);
    try {
      adapter.applyPermissionPolicy(spec.agent.permissions.posture);
      // A harness without a system prompt gets the contract in its input instead (on a fresh session).
      if (spec.harness.capabilities.systemPrompt) adapter.setSystemPrompt(spec.agent.systemPrompt);
      const prompt = spec.harness.capabilities.systemPrompt || resumeSessionId !== undefined ? input : promptWithContract(spec.agent.systemPrompt, input);
      await adapter.start({
        runId: req.workflowId,
        harnessName: spec.harness.name,
        executable: spec.harness.executable,
        baseArgs: spec.harness.args,
        model: spec.harness.model,
        workspacePath: req.sandbox.workspacePath,
        hostWorkspacePath: req.sandbox.hostWorkspacePath,
        env: { ...spec.harness.env, ...secretEnv },
        executor: handle.executor,
        resumeSessionId,
        baseUrl: spec.harness.baseUrl,
        turnTimeoutMs: spec.harness.turnTimeoutMs,
        settings: spec.harness.settings,
      });
      let usageReported = false;
      // Every event is redacted as it leaves the adapter: nothing below sees a harness string unredacted (the
      // gate sees a permission request as asked, to decide on it, and stores it redacted).
      const events = redactStream(adapter.runTurn({ prompt, turn: req.turn, signal, gate }), redact);
      const turn = await collectTurn(events, async (event) => {
        progress.events += 1;
        // A usage report is not something the harness does: it keeps the last thing it did as lastEvent.
        if (event.type !== 'usage' || progress.lastEvent === 'starting') progress.lastEvent = describeEvent(event, redact);
        if (event.type === 'usage') {
          usageReported = true;
          progress.tokens += totalTokens(event.usage);
          if (event.costUsd !== undefined) progress.costUsd = (progress.costUsd ?? 0) + event.costUsd;
        }
        if (event.type !== 'text') await deps.ledger.appendEvent(req.workflowId, req.turn, event.type, clipEvent(event));
      });
      if (signal.aborted) throw signal.reason ?? new Error('turn cancelled');
      // What the adapter remembers did not come through the stream: redacted here.
      return { turn, usageReported, sessionId: optional(adapter.externalSessionId, redact), model: optional(adapter.reportedModel, redact), resumed: adapter.resumed };
    } finally {
      await adapter.end().catch(() => undefined);
    }
  }
}

/** The heartbeat details of a running turn. */
interface TurnProgress {
  turn: number;
  attempt: number;
  lastEvent: string;
  tokens: number;
  /** Cost the harness reported so far in this turn (when it reports one). */
  costUsd?: number;
  events: number;
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
}

/** A turn request with the run it belongs to. */
type RunTurn = Omit<TurnRequest, 'sandbox'> & { readonly sandbox: SandboxRef; readonly workflowId: string };

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}… (${text.length} characters in all)` : text;
}

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
): ApplicationFailure {
  const stderr = error.stderrTail ? `\n${redact(error.stderrTail).slice(-2000)}` : '';
  // The CLI base class words a missing executable the same way locally (ENOENT) and in a container (exit 127).
  if (error.code === 'process-exit' && /could not start: executable .* was not found/.test(error.message)) {
    return ApplicationFailure.nonRetryable(redact(error.message), FailureTypes.HarnessBinaryMissing);
  }
  return ApplicationFailure.retryable(`turn failed (${error.code}): ${redact(error.message)}${stderr}`, FailureTypes.TurnFailed, { code: error.code, exitCode: error.exitCode ?? null });
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

