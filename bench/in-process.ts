/**
 * The agent loop as plain function calls, with the same activity code the workflow runs and no Temporal:
 * runTurn → recordPromptRun → validateStep → actions, one `turn()` at a time. The orchestration bench times
 * whole runs of it (the in-process baseline), and the floor workflow runs one `turn()` per activity.
 * When the workflow's activity sequence changes, this is the one place to follow it.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import type { createActivities } from '../src/activities/index.js';
import type { SandboxRef } from '../src/sandbox/types.js';
import { formatActionResults } from '../src/workflows/prompts.js';
import type { ActionOutcome, AgentSpec } from '../src/workflows/types.js';

type Activities = ReturnType<typeof createActivities>;

const identity = { tenantId: 'bench', userId: 'bench' };

/** One run of `agent` on `task`, driven turn by turn. */
export class InProcessRun {
  private readonly mock = new MockActivityEnvironment({ attempt: 1 }, { logger: new DefaultLogger('ERROR') });
  private spec: AgentSpec | undefined;
  private sandbox: SandboxRef | undefined;
  private prompt: string;
  private sessionId: string | undefined;
  private seq = 0;
  turns = 0;

  constructor(
    private readonly activities: Activities,
    private readonly workflowId: string,
    private readonly agent: string,
    task: string,
  ) {
    this.prompt = task;
  }

  private run<A extends unknown[], R>(fn: (...args: A) => Promise<R>, ...args: A): Promise<R> {
    return this.mock.run(fn, ...args) as Promise<R>;
  }

  /**
   * One turn, starting the session first on turn 1 and ending it when the harness says success or failure.
   * Returns the harness's reply text and whether the run is over.
   */
  async turn(): Promise<{ done: boolean; text: string }> {
    const a = this.activities;
    const workflowId = this.workflowId;
    if (!this.spec) {
      this.spec = await a.resolveAgent({ agent: this.agent });
      this.sandbox = await this.run(a.startSession, { workflowId, runId: 'bench', spec: this.spec, identity, task: this.prompt });
    }
    const spec = this.spec;
    const sandbox = this.sandbox!;
    const turn = ++this.turns;
    if (turn > spec.guardrails.maxIterations) throw new Error(`in-process run ${workflowId} did not finish in ${spec.guardrails.maxIterations} turns`);
    const outcome = await this.run(a.runTurn, { workflowId, runId: 'bench', turn, spec, sandbox, prompt: this.prompt, resumeSessionId: this.sessionId });
    if (!outcome.ok) throw new Error(outcome.message);
    this.sessionId = outcome.externalSessionId;
    await a.recordPromptRun({
      workflowId, turn, promptId: spec.promptId, vendor: spec.vendor, model: spec.model, reportedModel: outcome.model, usage: outcome.usage,
      costUsd: outcome.costUsd, costSource: outcome.costSource, externalSessionId: outcome.externalSessionId, resumed: outcome.resumed,
      durationMs: outcome.durationMs, input: this.prompt, output: outcome.text,
    });
    const validation = await a.validateStep({ workflowId, turn, seq: ++this.seq, text: outcome.text, spec });
    if (!validation.ok) throw new Error(validation.problem);
    const step = validation.step;
    if (step.step === 'success' || step.step === 'failed') {
      const status = step.step === 'success' ? 'succeeded' : 'failed';
      await this.run(a.endSession, { workflowId, spec, sandbox, status, result: { workflowId, status, iterations: turn, usage: outcome.usage, costUsd: 0 } });
      return { done: true, text: outcome.text };
    }
    if (step.step !== 'actions') throw new Error(`unexpected step ${step.step}`);
    const outcomes: ActionOutcome[] = [];
    for (const call of step.actions) {
      outcomes.push(await this.run(a.executeAction, { workflowId, agent: spec.agent, sandbox, call, seq: ++this.seq, turn }));
    }
    this.prompt = formatActionResults(step.actions, outcomes);
    return { done: false, text: outcome.text };
  }

  /** Runs to the end; returns the number of turns. */
  async all(): Promise<number> {
    while (!(await this.turn()).done);
    return this.turns;
  }
}
