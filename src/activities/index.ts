/**
 * The activities of `agentRun`, made by a factory that receives their dependencies.
 * Adapters and sandbox handles live only inside an activity; between activities a session is a `SandboxRef`.
 */
import { ApplicationFailure, Context, activityInfo, heartbeat } from '@temporalio/activity';
import type { ActionRegistry } from '../actions/index.js';
import type { AdapterRegistry } from '../adapters/registry.js';
import { UnknownDriverError } from '../adapters/registry.js';
import { collectTurn } from '../adapters/fold.js';
import type { Capabilities, HarnessEvent } from '../adapters/types.js';
import type { Catalog } from '../catalog/schema.js';
import { agentSystemPrompt, allowedActionsOf, catalogEntries, envelopeRulesFor, findAgent, findHarness, promptWithContract } from '../catalog/index.js';
import { resolveCredentials, createRedactor, type CredentialStore } from '../credentials/index.js';
import { formatFeedback, parseEnvelope, type EnvelopeRules } from '../envelope/index.js';
import type { ActionCall } from '../envelope/types.js';
import type { Ledger, RunStatus } from '../ledger/types.js';
import { UnresolvedAccountingError } from '../ledger/types.js';
import { createPermissionGate, ledgerApprovalBroker, policyFor, policyIsInteractive } from '../permissions/index.js';
import type { ApprovalBroker } from '../permissions/index.js';
import type { ApprovalRecord } from '../ledger/types.js';
import { killStaleProcessGroup } from '../sandbox/pidfile.js';
import type { RunIdentity, SandboxHandle, SandboxProvider, SandboxRef } from '../sandbox/types.js';
import type {
  ActionOutcome,
  AgentRunResult,
  AgentSpec,
  InheritedBudget,
  RunOutcome,
  StepValidation,
  TurnOutcome,
  TurnSpend,
} from '../workflows/types.js';
import { totalTokens } from '../workflows/usage.js';
import { FailureTypes } from './failure-types.js';
import { isRetryable, ProgressEvents, TurnAccounting, type BudgetCrossing, type TurnBudget } from './turn-accounting.js';

/** Everything the activities need, injected by the worker (or a test). */
export interface ActivityDeps {
  /** The current catalog; read at run start only, so a config change never breaks a running workflow's replay. */
  readonly catalog: () => Catalog;
  readonly adapters: AdapterRegistry;
  readonly sandboxes: Readonly<Record<string, SandboxProvider>>;
  readonly ledger: Ledger;
  readonly actions: ActionRegistry;
  readonly credentials: CredentialStore;
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
}

const defaultCapabilities: Capabilities = {
  sessionResume: false,
  structuredOutput: false,
  usageReporting: false,
  permissionHooks: false,
  modelSelection: false,
  systemPrompt: false,
};

export function createActivities(deps: ActivityDeps) {
  const env = deps.env ?? process.env;

  /**
   * What each catalog version yields (system prompts, envelope rules, its ledger sync) is computed once, not per
   * turn: the catalog object only changes when its file does.
   */
  const derived = new WeakMap<Catalog, { prompts: Map<string, string>; rules: Map<string, EnvelopeRules>; synced?: Promise<void> }>();
  const derivedFor = (catalog: Catalog) => {
    let d = derived.get(catalog);
    if (!d) derived.set(catalog, (d = { prompts: new Map(), rules: new Map() }));
    return d;
  };
  const memo = <T>(map: Map<string, T>, key: string, make: () => T): T => {
    if (!map.has(key)) map.set(key, make());
    return map.get(key)!;
  };
  const systemPrompt = (catalog: Catalog, agent: string) => memo(derivedFor(catalog).prompts, agent, () => agentSystemPrompt(catalog, agent, deps.actions));
  const rules = (catalog: Catalog, agent: string) => memo(derivedFor(catalog).rules, agent, () => envelopeRulesFor(catalog, agent, deps.actions));
  const syncCatalog = (catalog: Catalog) => {
    const d = derivedFor(catalog);
    d.synced ??= waitForLedger(() => deps.ledger.syncCatalog(catalogEntries(catalog, deps.actions))).catch((err: unknown) => {
      d.synced = undefined; // a failed sync is tried again by the next run
      throw err;
    });
    return d.synced;
  };

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

  function specFor(agentName: string, budget?: InheritedBudget): AgentSpec {
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
    const policy = provider(agent.sandbox.provider).enforces(agent.sandbox.networkPolicy);
    if (policy === 'refused') {
      throw ApplicationFailure.nonRetryable(
        `Sandbox provider "${agent.sandbox.provider}" cannot enforce network policy "${agent.sandbox.networkPolicy}" for agent "${agent.name}". Use the docker provider, or choose another policy.`,
        FailureTypes.SandboxPolicyRefused,
      );
    }
    // Fail at resolution, not three attempts later: a harness whose key cannot be resolved never works.
    permanent(() => resolveCredentials({ agent, harness, store: deps.credentials, env }), FailureTypes.CredentialMissing);
    const adapterCaps = deps.adapters.create(harness.driverClass).capabilities;
    const capabilities: Capabilities = { ...defaultCapabilities, ...adapterCaps, ...(harness.capabilities ?? {}) };
    const permissionPolicy = agent.permissions;
    const gated = policyIsInteractive(permissionPolicy);
    if (gated && !capabilities.permissionHooks && !permissionPolicy.advisory) {
      const what = permissionPolicy.posture === 'strict' ? 'permission posture "strict"' : 'permission rules';
      throw ApplicationFailure.nonRetryable(
        `Agent "${agent.name}" has ${what}, but harness "${harness.name}" (${harness.driverClass}) cannot ask before a tool runs ` +
          '(no permission hooks), so it could not be enforced. Use a harness with permission hooks, use "auto" without rules, ' +
          'or set permissions.advisory: true for this agent to run it with the posture reported as not enforced.',
        FailureTypes.PermissionHooksMissing,
      );
    }
    const g = agent.guardrails;
    return {
      agent: agent.name,
      harness: harness.name,
      driverClass: harness.driverClass,
      vendor: harness.vendor,
      model: harness.model,
      promptId: `agent:${agent.name}`,
      capabilities,
      permissions: permissionPolicy.posture,
      permissionPolicy,
      permissionsEnforced: !gated || capabilities.permissionHooks,
      sandbox: { provider: agent.sandbox.provider, workspaceScope: agent.sandbox.workspaceScope, networkPolicy: agent.sandbox.networkPolicy, options: agent.sandbox.options },
      guardrails: {
        maxIterations: Math.min(g.maxIterations, budget?.maxIterations ?? Infinity),
        maxTokens: Math.min(g.maxTokens, budget?.maxTokens ?? Infinity),
        maxCostUsd: Math.min(g.maxCostUsd, budget?.maxCostUsd ?? Infinity),
        maxWallTimeMs: g.maxWallTimeMs,
      },
      actions: allowedActionsOf(catalog, agent, deps.actions).map((a) => ({ name: a.name, maxExecutionsPerRun: a.maxExecutionsPerRun })),
      subAgents: agent.subAgents,
      maxMalformedTurns: agent.maxMalformedTurns,
      chatTimeoutMs: agent.chatTimeoutMs,
      operatorTimeoutMs: agent.operatorTimeoutMs,
      turnAttempts: agent.turnAttempts,
      turnTimeoutMs: harness.turnTimeoutMs,
      priced: harness.prices !== undefined,
    };
  }

  return {
    /** Resolves the agent from the catalog into a spec the workflow keeps in its history. */
    async resolveAgent(input: { agent: string; budget?: InheritedBudget }): Promise<AgentSpec> {
      return specFor(input.agent, input.budget);
    },

    /** Creates (or reattaches) the run's sandbox and its ledger row. */
    async startSession(input: {
      workflowId: string;
      runId: string;
      spec: AgentSpec;
      identity: RunIdentity;
      task: string;
      parentWorkflowId?: string;
    }): Promise<SandboxRef> {
      const { spec } = input;
      await syncCatalog(deps.catalog());
      await waitForLedger(() => deps.ledger.startRun({
        workflowId: input.workflowId,
        runId: input.runId,
        agent: spec.agent,
        harness: spec.harness,
        tenantId: input.identity.tenantId,
        userId: input.identity.userId,
        task: input.task,
        parentWorkflowId: input.parentWorkflowId,
      }));
      // What the posture becomes on this harness, for operators reading the run's record.
      const policy = spec.permissionPolicy ?? policyFor(spec.permissions);
      const report = deps.adapters.has(spec.driverClass) ? deps.adapters.create(spec.driverClass).applyPermissionPolicy(spec.permissions) : undefined;
      await waitForLedger(() =>
        deps.ledger.appendEvent(
          input.workflowId,
          0,
          'permissions',
          {
            posture: policy.posture,
            rules: { allow: policy.allow.length, deny: policy.deny.length, ask: policy.ask.length },
            gated: policyIsInteractive(policy),
            enforced: spec.permissionsEnforced ?? true,
            note: spec.permissionsEnforced === false ? `advisory: harness "${spec.harness}" cannot ask before a tool runs` : report?.note,
          },
          input.runId,
        ),
      );
      return sandboxCall(() =>
        provider(spec.sandbox.provider).start({ workflowId: input.workflowId, runId: input.runId, agent: spec.agent, identity: input.identity, spec: spec.sandbox }),
      );
    },

    /**
     * Drives one harness turn attempt in the sandbox: heartbeats progress, dies with the turn when cancelled, and
     * does its own accounting — a prompt-run row for the attempt and a usage row per model call as it streams, so
     * a failed, killed or lost attempt's tokens are in the ledger too. With `budget`, a turn whose streaming usage
     * crosses the run's remaining tokens or cost is stopped mid-turn (outcome `budget-exhausted`).
     */
    async runTurn(input: {
      workflowId: string;
      /** The ledger run (the run's first execution run id); one the ledger does not know means its latest run. */
      runId: string;
      turn: number;
      spec: AgentSpec;
      sandbox: SandboxRef;
      prompt: string;
      resumeSessionId?: string;
      /** The run's budget left when the workflow scheduled this turn; absent = no mid-turn stop. */
      budget?: TurnBudget;
    }): Promise<TurnOutcome> {
      const { spec } = input;
      const ctx = Context.current();
      const info = activityInfo();
      const catalog = deps.catalog();
      const agent = permanent(() => findAgent(catalog, spec.agent), FailureTypes.UnknownAgent);
      const harness = permanent(() => findHarness(catalog, spec.harness), FailureTypes.UnknownHarness);
      const credentials = permanent(
        () => resolveCredentials({ agent, harness, store: deps.credentials, env, log: ctx.log }),
        FailureTypes.CredentialMissing,
      );
      const redact = createRedactor(credentials.secrets);
      // One attempt of one scheduling of this turn: Temporal retries, operator retries and fresh-session replays
      // each get their own id, so their rows never collide and none is counted twice.
      const scheduling = `${info.workflowExecution?.runId ?? input.runId}:${info.activityId}:${input.turn}`;
      const attemptId = `${scheduling}:${info.attempt}`;
      const where = { workflowId: input.workflowId, runId: input.runId, turn: input.turn };
      const progress: { turn: number; attempt: number; lastEvent: string; tokens: number; costUsd: number; events: number; ledger: string; pendingApproval?: string } = {
        turn: input.turn,
        attempt: info.attempt,
        lastEvent: 'starting',
        tokens: 0,
        costUsd: 0,
        events: 0,
        ledger: 'ok',
      };
      const ledgerState = (err: Error | undefined) => {
        progress.ledger = err ? `waiting for the ledger: ${err.message}` : 'ok';
        if (err) ctx.log.warn('ledger write failed; retrying', { workflowId: input.workflowId, turn: input.turn, error: err.message });
      };
      const events = new ProgressEvents(deps.ledger, where, { onFault: ledgerState });
      const adapter = deps.adapters.create(spec.driverClass);
      const accounting = new TurnAccounting(
        deps.ledger,
        { ...where, attempt: info.attempt, attemptId },
        {
          prices: harness.prices,
          budget: input.budget,
          onFault: ledgerState,
          onAbandoned: (row, reason) => ctx.log.error('ledger row NOT written (enter it by hand once the ledger is back)', { row, reason }),
          // Durable: the harness may forget it (it re-reports what was never acknowledged).
          onRecorded: (ack) => void adapter.acknowledgeUsage?.(ack).catch(() => undefined),
        },
      );
      const beat = () => heartbeat({ ...progress });
      const timer = setInterval(beat, deps.heartbeatIntervalMs ?? 250);
      const gate = createPermissionGate({
        ledger: deps.ledger,
        workflowId: input.workflowId,
        runId: input.runId,
        turn: input.turn,
        policy: spec.permissionPolicy ?? policyFor(spec.permissions),
        workspace: input.sandbox.workspacePath,
        broker:
          deps.approvals ??
          ledgerApprovalBroker({
            ledger: deps.ledger,
            pollMs: deps.approvalPollMs,
            onPending: (record) => deps.onPendingApproval?.(record).catch((err: unknown) => ctx.log.warn('onPendingApproval failed', { error: String(err) })),
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
      const started = Date.now();
      let handle: SandboxHandle | undefined;
      const stopTurn = new AbortController();
      // Accounting waits for the ledger; only a cancelled attempt stops waiting, after a grace period, so a
      // cancellation always completes.
      let giveUp: NodeJS.Timeout | undefined;
      const onCancel = () => {
        stopTurn.abort(ctx.cancellationSignal.reason);
        giveUp = setTimeout(() => accounting.stop('the attempt was cancelled and the ledger stayed unwritable'), deps.cancelledAccountingGraceMs ?? 10_000);
      };
      ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
      const spendOf = (usageMissing = false) => {
        const spend = accounting.spend(usageMissing);
        return {
          usage: spend.usage,
          costUsd: spend.costUsd,
          costSource: spend.costSource,
          ...(spend.harnessCostUsd !== undefined ? { harnessCostUsd: spend.harnessCostUsd } : {}),
          costMismatch: spend.costMismatch,
          costBlind: spend.costBlind,
          attemptId,
          attempt: info.attempt,
          calls: spend.calls,
        };
      };
      let finished = false;
      const finish = async (f: Parameters<TurnAccounting['finish']>[0]) => {
        finished = true;
        progress.lastEvent = `recording turn ${input.turn}`;
        await accounting.finish(f);
      };
      try {
        handle = await sandboxCall(() => provider(spec.sandbox.provider).attach(input.sandbox));
        if (info.attempt > 1) {
          // A crashed or timed-out earlier attempt may have left its process running: never run two at once.
          await killStaleTurn(handle);
          events.append('retry', { attempt: info.attempt });
        }
        // The attempt's prompt run first: an unresolvable id fails before any token is spent, and while the ledger
        // cannot be written the turn waits (heartbeating) instead of spending tokens nobody would record.
        progress.lastEvent = 'opening the prompt run';
        try {
          await accounting.begin(
            { promptId: spec.promptId, vendorId: spec.vendor, modelId: `${spec.vendor}/${spec.model}`, input: redact(input.prompt) },
            (id) => id.startsWith(`${scheduling}:`),
          );
        } catch (err) {
          if (err instanceof UnresolvedAccountingError) throw ApplicationFailure.nonRetryable(err.message, FailureTypes.AccountingUnresolved);
          if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? err;
          throw err;
        }
        adapter.applyPermissionPolicy(spec.permissions);
        // A harness without a system prompt gets the contract in its input instead (on a fresh session).
        const contract = systemPrompt(catalog, spec.agent);
        if (spec.capabilities.systemPrompt) adapter.setSystemPrompt(contract);
        const prompt = spec.capabilities.systemPrompt || input.resumeSessionId !== undefined ? input.prompt : promptWithContract(contract, input.prompt);
        await adapter.start({
          runId: input.workflowId,
          harnessName: harness.name,
          executable: harness.executable,
          baseArgs: harness.args,
          model: harness.model,
          workspacePath: input.sandbox.workspacePath,
          hostWorkspacePath: input.sandbox.hostWorkspacePath,
          env: { ...harness.env, ...credentials.env },
          executor: handle.executor,
          resumeSessionId: input.resumeSessionId,
          baseUrl: harness.baseUrl,
          turnTimeoutMs: harness.turnTimeoutMs,
          // A catalog that declares `capabilities.sessionFork` asks the adapter to fork resumed sessions.
          settings: harness.capabilities?.sessionFork !== undefined ? { forkSessions: harness.capabilities.sessionFork, ...harness.settings } : harness.settings,
        });
        beat();
        let crossing: BudgetCrossing | undefined;
        const turn = await collectTurn(adapter.runTurn({ prompt, turn: input.turn, attemptId, signal: stopTurn.signal, gate }), (event) => {
          progress.events += 1;
          progress.lastEvent = describeEvent(event, redact);
          if (event.type === 'usage') {
            const cost = event.costUsd !== undefined ? { costUsd: event.costUsd } : {};
            const crossed = event.recovered
              ? accounting.recordRecovered({ usage: event.usage, ...cost, recovered: event.recovered })
              : accounting.recordUsage({ usage: event.usage, ...cost, ...(event.call !== undefined ? { call: event.call } : {}) });
            const spend = accounting.spend();
            progress.tokens = totalTokens(spend.usage);
            progress.costUsd = spend.costUsd;
            if (crossed && !crossing) {
              crossing = crossed;
              progress.lastEvent = crossed.reason;
              stopTurn.abort(new Error(crossed.reason));
            }
          }
          if (event.type !== 'text') events.append(event.type, redactDeep(event, redact));
        });
        const sessionId = turn.sessionId ?? adapter.externalSessionId;
        const resumed = turn.resumed || adapter.resumed;
        const durationMs = () => Date.now() - started;
        const model = turn.model ?? adapter.reportedModel;
        const base = { resumed, ...(sessionId ? { externalSessionId: sessionId } : {}), ...(model ? { reportedModel: model } : {}) };
        if (ctx.cancellationSignal.aborted) {
          await finish({ ...base, status: 'cancelled', outputUsed: false, output: '', error: 'cancelled', durationMs: durationMs() });
          throw ctx.cancellationSignal.reason ?? new Error('turn cancelled');
        }
        if (crossing) {
          await finish({ ...base, status: 'budget-exhausted', outputUsed: false, output: '', error: crossing.reason, durationMs: durationMs() });
          return { ok: false, code: 'budget-exhausted', guardrail: crossing.guardrail, message: crossing.reason, ...spendOf(), ...(sessionId ? { externalSessionId: sessionId } : {}), durationMs: durationMs() };
        }
        if (turn.error) {
          const message = redact(turn.error.message);
          if (turn.error.code === 'resume-failed') {
            await finish({ ...base, status: 'resume-failed', outputUsed: false, output: '', error: message, durationMs: durationMs() });
            return { ok: false, code: 'resume-failed', message, ...spendOf() };
          }
          await finish({ ...base, status: 'failed', outputUsed: false, output: '', error: message, durationMs: durationMs() });
          throw turnFailure(turn.error, redact, spendOf());
        }
        // Requests of this turn still pending came from an earlier attempt whose harness no longer asks them.
        // Nobody waits for them and the run's end expires them anyway, so this never holds up the turn.
        events.write(() => deps.ledger.expireApprovals(input.workflowId, 'turn ended without asking it again', input.turn, input.runId));
        // A turn that ran and reported no usage at all spent tokens nobody counted: its cost is blind.
        const usageMissing = turn.usageEvents === 0;
        const text = redact(turn.text ?? '');
        if (sessionId) events.write(() => deps.ledger.setExternalSessionId(input.workflowId, sessionId, input.runId));
        await finish({ ...base, status: 'succeeded', outputUsed: true, output: text, durationMs: durationMs(), usageMissing });
        return {
          ok: true,
          text,
          ...spendOf(usageMissing),
          usageReported: turn.usageEvents > 0,
          model,
          externalSessionId: sessionId,
          resumed,
          durationMs: durationMs(),
        };
      } catch (err) {
        // Anything else that ended the attempt (a sandbox error, a throw above) still closes its prompt run.
        if (!finished && accounting.begun) {
          const message = redact(err instanceof Error ? err.message : String(err));
          await finish({ resumed: false, status: ctx.cancellationSignal.aborted ? 'cancelled' : 'failed', outputUsed: false, output: '', error: message, durationMs: Date.now() - started }).catch(() => undefined);
        }
        throw err;
      } finally {
        ctx.cancellationSignal.removeEventListener('abort', onCancel);
        clearTimeout(giveUp);
        clearInterval(timer);
        await adapter.end().catch(() => undefined);
        await handle?.release().catch(() => undefined);
        // Progress is not accounting: give its writes a moment, then let them go.
        await events.close(2000);
      }
    },

    /**
     * Kept so histories that schedule it still replay: `runTurn` now records the attempt's prompt run and usage
     * itself. Writes nothing; says whether the turn has an accepted attempt in the ledger.
     */
    async recordPromptRun(input: { workflowId: string; turn: number } & Record<string, unknown>): Promise<{ inserted: boolean }> {
      void input;
      return { inserted: false };
    },

    /** Validates the envelope: the step and per-action problems, or exact feedback for the harness. */
    async validateStep(input: { workflowId: string; turn: number; seq: number; text: string; spec: AgentSpec }): Promise<StepValidation> {
      const parsed = parseEnvelope(input.text, rules(deps.catalog(), input.spec.agent));
      await waitForLedger(() => deps.ledger.recordStep({
        workflowId: input.workflowId,
        seq: input.seq,
        turn: input.turn,
        type: parsed.ok ? `step:${parsed.step.step}` : 'malformed-envelope',
        payload: parsed.ok ? { step: parsed.step, actionErrors: parsed.actionErrors } : { problem: parsed.problem },
      }));
      if (!parsed.ok) return { ok: false, problem: parsed.problem, feedback: formatFeedback(parsed.problem) };
      const problems: (string | undefined)[] = parsed.step.step === 'actions' ? parsed.step.actions.map(() => undefined) : [];
      for (const e of parsed.actionErrors) if (e.kind !== 'unknown-sub-agent') problems[e.index] = e.problem;
      return { ok: true, step: parsed.step, actionProblems: problems };
    },

    /** Runs one allowed, validated action on the harness's behalf and records it. */
    async executeAction(input: { workflowId: string; agent: string; sandbox: SandboxRef; call: ActionCall; seq: number; turn: number }): Promise<ActionOutcome> {
      const catalog = deps.catalog();
      const config = catalog.actions.find((a) => a.name === input.call.name);
      const def = deps.actions.get(config?.implementation ?? input.call.name);
      let outcome: ActionOutcome;
      if (!def) {
        outcome = { ok: false, error: `action "${input.call.name}" has no implementation on this worker` };
      } else {
        const parsed = def.parameters.safeParse(input.call.params);
        if (!parsed.success) {
          outcome = { ok: false, error: `invalid parameters: ${parsed.error.message}` };
        } else {
          try {
            const output = await def.execute(parsed.data, {
              workflowId: input.workflowId,
              agent: input.agent,
              hostWorkspacePath: input.sandbox.hostWorkspacePath,
              settings: config?.settings ?? {},
              signal: Context.current().cancellationSignal,
            });
            outcome = { ok: true, output };
          } catch (err) {
            outcome = { ok: false, error: err instanceof Error ? err.message : String(err) };
          }
        }
      }
      await waitForLedger(() =>
        deps.ledger.recordStep({ workflowId: input.workflowId, seq: input.seq, turn: input.turn, type: `action:${input.call.name}`, payload: { call: input.call, outcome } }),
      );
      return outcome;
    },

    /** Compensation: releases the sandbox and closes the ledger row. Idempotent; runs on every exit path. */
    async endSession(input: { workflowId: string; spec: AgentSpec; sandbox?: SandboxRef; status: RunOutcome; result: AgentRunResult }): Promise<void> {
      if (input.sandbox) await sandboxCall(() => provider(input.spec.sandbox.provider).end(input.sandbox!));
      // Its effect happens once: a re-run (a retried attempt, a replayed workflow task after a crash) finds the run
      // already closed and writes nothing again.
      const run = await deps.ledger.getRun(input.workflowId);
      if (run?.finishedAt !== undefined) return;
      await waitForLedger(() => deps.ledger.appendEvent(input.workflowId, input.result.iterations, 'end', { status: input.status, reason: input.result.reason }));
      await waitForLedger(() => deps.ledger.expireApprovals(input.workflowId, `run ${input.status}`));
      await waitForLedger(() => deps.ledger.finishRun(input.workflowId, input.status satisfies RunStatus, input.result));
    },
  };
}

/**
 * A ledger write from a short activity: ledger faults (read-only, deleted file, I/O) are retried with backoff
 * inside the activity until shortly before its timeout, then the activity fails retryably (and Temporal tries it
 * again) — rows wait for the ledger instead of being dropped.
 */
async function waitForLedger<T>(write: () => Promise<T>): Promise<T> {
  let context: Context | undefined;
  try {
    context = Context.current();
  } catch {
    context = undefined; // called outside an activity (e.g. the memoised catalog sync): no deadline to respect
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

function redactDeep(value: unknown, redact: (s: string) => string): unknown {
  return JSON.parse(redact(JSON.stringify(value)));
}

/** Kills what an earlier attempt of this turn left running: by pidfile locally, inside the container for Docker. */
async function killStaleTurn(handle: SandboxHandle): Promise<void> {
  const local = handle as SandboxHandle & { pidFile?: string };
  const executor = handle.executor as SandboxHandle['executor'] & { killLeftovers?: () => Promise<unknown> };
  if (executor.killLeftovers) await executor.killLeftovers();
  else if (local.pidFile) await killStaleProcessGroup(local.pidFile);
}

/**
 * The failure of a turn attempt. Its details carry the attempt's spend (already in the ledger), so whoever sees
 * the failure can count the tokens without reading the ledger.
 */
function turnFailure(
  error: { code: string; message: string; exitCode?: number | null; stderrTail?: string },
  redact: (s: string) => string,
  spend: TurnSpend,
): ApplicationFailure {
  const stderr = error.stderrTail ? `\n${redact(error.stderrTail).slice(-2000)}` : '';
  // The CLI base class words a missing executable the same way locally (ENOENT) and in a container (exit 127).
  if (error.code === 'process-exit' && /could not start: executable .* was not found/.test(error.message)) {
    return ApplicationFailure.nonRetryable(redact(error.message), FailureTypes.HarnessBinaryMissing, { code: error.code, spend });
  }
  return ApplicationFailure.retryable(`turn failed (${error.code}): ${redact(error.message)}${stderr}`, FailureTypes.TurnFailed, { code: error.code, exitCode: error.exitCode ?? null, spend });
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

