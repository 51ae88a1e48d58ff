/** Turn inputs the workflow composes: step results, feedback, replays. Pure string work. */
import type { ActionCall } from '../envelope/types.js';
import type { ActionOutcome, AgentRunResult, ConversationEntry } from './types.js';

const MAX_OUTPUT_CHARS = 16_000;

function show(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2);
  return text.length > MAX_OUTPUT_CHARS ? `${text.slice(0, MAX_OUTPUT_CHARS)}\n… (truncated, ${text.length} characters in all)` : text;
}

/** The results of an `actions` step, one numbered entry per call, in the order asked. */
export function formatActionResults(calls: readonly ActionCall[], outcomes: readonly ActionOutcome[]): string {
  const lines = ['Results of the actions you asked for:'];
  calls.forEach((call, i) => {
    const outcome = outcomes[i];
    if (outcome?.ok) lines.push(`${i + 1}. ${call.name}: ok`, show(outcome.output ?? null));
    else lines.push(`${i + 1}. ${call.name}: error: ${outcome?.error ?? 'not run'}`);
  });
  lines.push('', 'Continue the task, and end this turn with one next-step JSON envelope.');
  return lines.join('\n');
}

export function formatSubAgentResult(agent: string, result: AgentRunResult): string {
  const body = result.status === 'succeeded' ? show(result.result ?? '') : `${result.status}: ${result.reason ?? 'no reason given'}`;
  return `Sub-agent "${agent}" finished (${result.status}).\n${body}\n\nContinue the task, and end this turn with one next-step JSON envelope.`;
}

export function formatSubAgentRefused(agent: string, allowed: readonly string[]): string {
  const list = allowed.length ? allowed.join(', ') : 'none';
  return `Sub-agent "${agent}" is not allowed for this agent (allowed: ${list}). Nothing was started.\n\nContinue the task, and end this turn with one next-step JSON envelope.`;
}

export function formatReply(reply: string): string {
  return `The user replied:\n${reply}\n\nContinue the task, and end this turn with one next-step JSON envelope.`;
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
