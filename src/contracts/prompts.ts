/** Turn inputs: step results, feedback, replays. Pure string work, shared by the workflow and the turn activity. */
import type { ActionCall } from './envelope.js';
import type { ActionOutcome, AgentRunResult, ConversationEntry } from './run.js';
import type { TextRef } from './text-ref.js';

const MAX_OUTPUT_CHARS = 16_000;
const CONTINUE = '\n\nContinue the task, and end this turn with one next-step JSON envelope.';

function show(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2);
  return text.length > MAX_OUTPUT_CHARS ? `${text.slice(0, MAX_OUTPUT_CHARS)}\n… (truncated, ${text.length} characters in all)` : text;
}

/** The results of an `actions` step, one numbered entry per call, in the order asked. */
export function formatActionResults(calls: readonly Pick<ActionCall, 'name'>[], outcomes: readonly ActionOutcome[]): string {
  const lines = ['Results of the actions you asked for:'];
  calls.forEach((call, i) => {
    const outcome = outcomes[i];
    if (outcome?.ok) lines.push(`${i + 1}. ${call.name}: ok`, show(outcome.output ?? null));
    else lines.push(`${i + 1}. ${call.name}: error: ${outcome?.error ?? 'not run'}`);
  });
  lines.push('', 'Continue the task, and end this turn with one next-step JSON envelope.');
  return lines.join('\n');
}

/** A sub-agent's answer as the parent's next input; a large result stays a reference until the turn joins it. */
export function subAgentResultPrompt(agent: string, result: AgentRunResult): TextRef[] {
  const head = `Sub-agent "${agent}" finished (${result.status}).\n`;
  if (result.status !== 'succeeded') return [`${head}${result.status}: ${result.reason ?? 'no reason given'}${CONTINUE}`];
  return [head, result.resultRef ?? show(result.result ?? ''), CONTINUE];
}

export function subAgentRefusedPrompt(agent: string, allowed: readonly string[]): TextRef[] {
  const list = allowed.length ? allowed.join(', ') : 'none';
  return [`Sub-agent "${agent}" is not allowed for this agent (allowed: ${list}). Nothing was started.${CONTINUE}`];
}

export function subAgentTooDeepPrompt(agent: string): TextRef[] {
  return [
    `Sub-agent "${agent}" was not started: this run is already at the deepest sub-agent level its run tree allows ` +
      `(guardrails.maxSubAgentDepth of the tree's root). Do the work yourself, or end the turn with a result.${CONTINUE}`,
  ];
}

export function replyPrompt(reply: TextRef): TextRef[] {
  return ['The user replied:\n', reply, CONTINUE];
}

/** A fresh session's input when the harness cannot resume: the whole conversation so far, then the new message. */
export function formatReplay(conversation: readonly ConversationEntry[], next: string): string {
  const lines = [
    'This continues an earlier conversation whose session could not be resumed. Here it is, oldest first:',
    '',
  ];
  for (const entry of conversation) lines.push(`<${entry.role}>`, entry.text, `</${entry.role}>`);
  lines.push('', 'The newest message follows.', '', next);
  return lines.join('\n');
}

/** What the harness is told when its reply is over the size cap. */
export function replyTooLargeProblem(bytes: number, limit: number): string {
  return `the reply was ${bytes} bytes, over this harness's limit of ${limit} bytes; keep replies short and put large content in files in your workspace`;
}
