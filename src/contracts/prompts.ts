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
export function formatReplay(conversation: readonly ConversationEntry[], next: string, maxTokens = DEFAULT_REPLAY_MAX_TOKENS): string {
  const head = 'This continues an earlier conversation whose session could not be resumed. Here it is, oldest first:';
  const tail = ['', 'The newest message follows.', '', next];
  const verbatim = (entries: readonly ConversationEntry[]) => entries.flatMap((e) => [`<${e.role}>`, e.text, `</${e.role}>`]);
  const full = [head, '', ...verbatim(conversation), ...tail].join('\n');
  if (replayTokens(full) <= maxTokens) return full;

  // Over the budget: the task and the newest whole turns that fit stay verbatim; the reply to the task and the turns
  // between become one digest line each (what the turn was given, what it replied), held to a quarter of the budget.
  // Only the task is kept whatever its size: a harness's own reply, however large, is never replayed for ever.
  const turns: ConversationEntry[][] = [];
  for (let i = 0; i < conversation.length; i += 2) turns.push(conversation.slice(i, i + 2));
  const task = verbatim(turns[0]?.slice(0, 1) ?? []);
  const digestBudget = Math.floor(maxTokens / 4);
  let left = maxTokens - digestBudget - replayTokens([head, '', ...task, ...tail].join('\n'));
  let kept = turns.length;
  while (kept > 1) {
    const cost = replayTokens(verbatim(turns[kept - 1]!).join('\n')) + 1;
    if (cost > left) break;
    left -= cost;
    kept -= 1;
  }
  // lines[i] is turn i + 1 (turn 1: its reply only, its task is above).
  const lines = turns.slice(0, kept).map((turn, i) => `- turn ${i + 1}: ${i === 0 ? '' : `given "${gist(turn[0]?.text ?? '')}"; `}replied ${replyGist(turn[1]?.text ?? '')}`);
  // The newest digest lines that fit its quarter; the older ones are named as omitted.
  let start = lines.length;
  for (let used = 0; start > 0 && used + replayTokens(lines[start - 1]!) + 1 <= digestBudget; start -= 1) used += replayTokens(lines[start - 1]!) + 1;
  const digest = [
    `The reply to the task${kept > 1 ? ` and turns 2 to ${kept}` : ''} (${kept} turn${kept === 1 ? '' : 's'}) are summarised below, not verbatim, to keep this replay under ${maxTokens} tokens:`,
    ...(start > 0 ? [`- turns 1 to ${start}: omitted`] : []),
    ...lines.slice(start),
  ];
  return [head, '', ...task, '', ...digest, '', ...verbatim(turns.slice(kept).flat()), ...tail].join('\n');
}

/** The replay budget's default, in tokens: well under common context sizes. */
export const DEFAULT_REPLAY_MAX_TOKENS = 24_000;

/** Tokens as the replay budget counts them: ~4 characters each (deterministic, no tokenizer). */
export function replayTokens(text: string): number {
  return Math.ceil(text.length / 4);
}

/** A message's opening, on one line. */
function gist(text: string, chars = 120): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > chars ? `${line.slice(0, chars)}…` : line;
}

/** A reply as its envelope's step and action names, when it has one; else its opening. */
function replyGist(text: string): string {
  const step = /"step"\s*:\s*"([\w-]+)"/.exec(text)?.[1];
  if (!step) return `"${gist(text)}"`;
  // At most a few names, each short: a reply that names thousands of actions still makes one short line.
  const names = [...new Set([...text.matchAll(/"name"\s*:\s*"([\w.-]{1,64})"/g)].map((m) => m[1]))];
  const shown = names.length > 8 ? [...names.slice(0, 8), `… ${names.length - 8} more`] : names;
  return names.length > 0 ? `step ${step} (${shown.join(', ')})` : `step ${step}`;
}

/** What the harness is told when its reply is over the size cap. */
export function replyTooLargeProblem(bytes: number, limit: number): string {
  return `the reply was ${bytes} bytes, over this harness's limit of ${limit} bytes; keep replies short and put large content in files in your workspace`;
}
