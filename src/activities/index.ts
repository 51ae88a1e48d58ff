/**
 * The activities of `agentRun`: one file per activity, bound here to the worker's dependencies (the composition
 * lives in the worker). Adapters and sandbox handles live only inside an activity; between activities a session is
 * a `SandboxRef`, the agent a frozen spec's hash, and large texts references into the blob store.
 */
import type { TurnRequest } from '../workflows/types.js';
import { approvalActivities } from './approvals.js';
import { decisionActivities } from './decisions.js';
import { withDefaults, type ActivityDeps } from './deps.js';
import { endSession, type EndSessionInput } from './end-session.js';
import { openRun, type OpenRunInput } from './open-run.js';
import { reprovisionSession, type ReprovisionSessionInput } from './reprovision-session.js';
import { deliverWork, type DeliverWorkInput } from './repository.js';
import { resolveAgent, type ResolveAgentInput } from './resolve-agent.js';
import { runTurn } from './run-turn.js';
import { startSession, type StartSessionInput } from './start-session.js';
import { storeText } from './store-text.js';
import { turnSpent, type TurnSpentInput } from './turn-spent.js';

export { DEFAULT_INLINE_TEXT_LIMIT, type ActivityDeps } from './deps.js';
export type { EndSessionOutcome } from './end-session.js';

export function createActivities(activityDeps: ActivityDeps) {
  const deps = withDefaults(activityDeps);
  return {
    openRun: (input: OpenRunInput) => openRun(deps, input),
    resolveAgent: (input: ResolveAgentInput) => resolveAgent(deps, input),
    startSession: (input: StartSessionInput) => startSession(deps, input),
    reprovisionSession: (input: ReprovisionSessionInput) => reprovisionSession(deps, input),
    runTurn: (request: TurnRequest) => runTurn(deps, request),
    turnSpent: (input: TurnSpentInput) => turnSpent(deps, input),
    storeText: (input: { text: string }) => storeText(deps, input),
    endSession: (input: EndSessionInput) => endSession(deps, input),
    deliverWork: (input: DeliverWorkInput) => deliverWork(deps, input),
    ...approvalActivities(deps.ledger, deps.approvalWakeups),
    ...decisionActivities({ ledger: deps.ledger, operators: deps.operators, decisionMode: deps.decisionMode }),
  };
}
