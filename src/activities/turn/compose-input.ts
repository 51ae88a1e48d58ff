/** The harness's input for a turn: the composed prompt, the feedback, or the results of the approved actions. */
import { ApplicationFailure } from '@temporalio/activity';
import { formatFeedback } from '../../envelope/index.js';
import type { NextStep } from '../../contracts/envelope.js';
import type { SandboxFs } from '../../sandbox/types.js';
import { formatActionResults, formatReplay } from '../../contracts/prompts.js';
import type { ActionOutcome, ConversationEntry } from '../../workflows/types.js';
import type { Deps } from '../deps.js';
import type { ProgressEvents } from './progress-events.js';
import { FailureTypes } from '../../contracts/failures.js';
import { waitForLedger } from '../ledger-wait.js';
import type { Redactor } from '../redaction.js';
import { runAction } from './actions.js';
import type { TurnRun } from './attempt.js';

export async function composeInput(deps: Deps, req: TurnRun, fs: SandboxFs, redact: Redactor, events?: Pick<ProgressEvents, 'append'>): Promise<string> {
  const input = req.input;
  switch (input.kind) {
    case 'prompt':
      return (await Promise.all(input.parts.map(deps.text))).join('');
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
        outcomes.push('refused' in planned ? { ok: false, error: planned.refused } : await runAction(deps, { workflowId: req.workflowId, specHash: req.specHash, call, seq: planned.seq, turn: req.turn - 1 }, fs, redact, events));
      }
      return formatActionResults(step.actions, outcomes);
    }
  }
}

/** `prompt` for a fresh session: after turn 1, with the run's conversation before this turn replayed (within `maxTokens`). */
export async function withHistory(deps: Deps, req: TurnRun, prompt: string, maxTokens: number | undefined): Promise<string> {
  return req.turn > 1 ? formatReplay(await conversationBefore(deps, req.workflowId, req.turn), prompt, maxTokens) : prompt;
}

/**
 * The conversation before `turn`, from the ledger's prompt runs: what a fresh session is given to continue. Only
 * the attempt whose output the run used counts for a turn (failed and superseded attempts are not conversation).
 */
async function conversationBefore(deps: Deps, workflowId: string, turn: number): Promise<ConversationEntry[]> {
  const rows = (await deps.ledger.listPromptRuns(workflowId)).filter((r) => r.turn < turn && r.outputUsed);
  return rows.flatMap((r): ConversationEntry[] => [{ role: 'user', text: r.input }, { role: 'assistant', text: r.output }]);
}
