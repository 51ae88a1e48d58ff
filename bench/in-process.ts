/**
 * The agent loop as plain function calls, with the same activity code and the same pure decisions
 * (src/workflows/decide.ts) the workflow runs, and no Temporal: resolveAgent → startSession → runTurn (actions →
 * harness → accounting → validation) → applyTurn, one `turn()` at a time, endSession at the end. The
 * orchestration bench times whole runs of it (the in-process baseline), and the floor workflow runs one `turn()`
 * per activity. When the workflow's activity sequence changes, this is the one place to follow it.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import type { createActivities } from '../src/activities/index.js';
import { applyTurn, beginTurn, initialState, resolved, runResult, sessionStarted } from '../src/workflows/decide.js';
import type { RunState } from '../src/workflows/state.js';

type Activities = ReturnType<typeof createActivities>;

const identity = { tenantId: 'bench', userId: 'bench' };

/** One run of `agent` on `task`, driven turn by turn. */
export class InProcessRun {
  private readonly mock: MockActivityEnvironment;
  private state: RunState;
  private started = false;
  turns = 0;

  constructor(
    private readonly activities: Activities,
    private readonly workflowId: string,
    agent: string,
    private readonly task: string,
  ) {
    // The turn reads the run's ids from its activity info, as in the workflow.
    this.mock = new MockActivityEnvironment({ attempt: 1, workflowExecution: { workflowId, runId: 'bench' } }, { logger: new DefaultLogger('ERROR') });
    this.state = initialState({ agent, task, identity });
  }

  private run<A extends unknown[], R>(fn: (...args: A) => Promise<R>, ...args: A): Promise<R> {
    return this.mock.run(fn, ...args) as Promise<R>;
  }

  /**
   * One turn, resolving the agent and starting the session first on turn 1 and ending it when the run ends.
   * Returns whether the run is over and the step the harness took.
   */
  async turn(): Promise<{ done: boolean; step: string }> {
    const a = this.activities;
    const workflowId = this.workflowId;
    if (!this.started) {
      this.started = true;
      const policy = await this.run(a.resolveAgent, { agent: this.state.agent });
      this.state = resolved(this.state, policy, Date.now());
      const started = await this.run(a.startSession, { workflowId, runId: 'bench', specHash: policy.specHash, identity, task: this.task });
      this.state = sessionStarted(this.state, started.sandbox, started.task);
    }
    const policy = this.state.policy!;
    const sandbox = this.state.sandbox!;
    const begun = beginTurn(this.state);
    this.turns = begun.request.turn;
    if (this.turns > policy.guardrails.maxIterations) throw new Error(`in-process run ${workflowId} did not finish in ${policy.guardrails.maxIterations} turns`);
    const result = await this.run(a.runTurn, { ...begun.request, specHash: policy.specHash, sandbox });
    const applied = applyTurn(begun.state, result);
    this.state = applied.state;
    const step = result.step.ok ? result.step.view.step : 'malformed';
    if (applied.decision.kind === 'end') {
      const outcome = runResult(this.state, workflowId, applied.decision.ending);
      await this.run(a.endSession, { workflowId, sandbox, releaseSandbox: true, status: outcome.status, result: outcome });
      return { done: true, step };
    }
    if (applied.decision.kind !== 'next') throw new Error(`in-process run ${workflowId}: unexpected decision ${applied.decision.kind}`);
    return { done: false, step };
  }

  /** Runs to the end; returns the number of turns. */
  async all(): Promise<number> {
    while (!(await this.turn()).done);
    return this.turns;
  }
}
