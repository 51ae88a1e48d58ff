/**
 * The replay a harness without native resume is given: the whole conversation while it fits the agent's budget; over
 * it, the task and the newest whole turns verbatim, the turns between them a labelled digest — so a long run's input
 * per turn stops growing instead of reaching the model's context limit.
 */
import { describe, expect, it } from 'vitest';
import type { ConversationEntry } from '../../src/contracts/run.js';
import { DEFAULT_REPLAY_MAX_TOKENS, formatReplay, replayTokens } from '../../src/contracts/prompts.js';

/** A run of `n` turns: the task, then action results; each reply an envelope asking for an echo. */
function conversation(n: number, replyChars = 200): ConversationEntry[] {
  return Array.from({ length: n }, (_, i) => [
    { role: 'user' as const, text: i === 0 ? 'The task: tidy the repository. script:long' : `Results of the actions you asked for:\n1. echo: ok\n"turn ${i}"` },
    { role: 'assistant' as const, text: `\`\`\`json\n{"step":"actions","actions":[{"name":"echo","params":{"text":"${'x'.repeat(replyChars)} ${i + 1}"}}]}\n\`\`\`` },
  ]).flat();
}

describe('formatReplay', () => {
  it('replays the whole conversation, oldest first, while it fits the budget', () => {
    const text = formatReplay(conversation(3), 'next');
    expect(text.split('</assistant>')).toHaveLength(4);
    expect(text).not.toContain('summarised');
    expect(text.endsWith('The newest message follows.\n\nnext')).toBe(true);
  });

  it('over the budget keeps the task and the newest whole turns, digests the turns between, and stays under the budget', () => {
    const budget = 4_000;
    const sizes = [50, 100, 300, 1_000].map((n) => replayTokens(formatReplay(conversation(n), 'next', budget)));
    for (const size of sizes) expect(size).toBeLessThanOrEqual(budget);
    // Flat once the budget is reached: 1,000 turns cost what 100 do, give or take a digest line.
    expect(Math.abs(sizes[3]! - sizes[1]!)).toBeLessThan(budget / 10);

    const text = formatReplay(conversation(300), 'next', budget);
    expect(text).toContain('The task: tidy the repository.');
    const verbatim = text.split('</assistant>').length - 1;
    const digested = Number(/The reply to the task and turns 2 to (\d+) \((\d+) turns\) are summarised below, not verbatim, to keep this replay under 4000 tokens:/.exec(text)?.[2]);
    // Every earlier turn is accounted for: verbatim or digested, none twice.
    expect(verbatim + digested).toBe(300);
    // The newest turn is verbatim, the one digested last just before the verbatim ones.
    expect(text).toContain(`${'x'.repeat(200)} 300"`);
    expect(text).toContain(`- turn ${300 - verbatim}: given "Results of the actions you asked for: 1. echo: ok "turn ${299 - verbatim}""; replied step actions (echo)`);
    expect(text).toMatch(/- turns 1 to \d+: omitted/);
  });

  it('a reply without an envelope is digested by its opening; a task larger than the budget is still kept whole', () => {
    const entries: ConversationEntry[] = [
      { role: 'user', text: `task ${'t'.repeat(20_000)}` },
      { role: 'assistant', text: 'I could not decide.' },
      { role: 'user', text: 'Your last reply was not a valid envelope.' },
      { role: 'assistant', text: 'Thinking it over again and again.' },
      { role: 'user', text: 'Try again.' },
      { role: 'assistant', text: '{"step":"success","result":"ok"}' },
    ];
    const text = formatReplay(entries, 'next', 1_000);
    expect(text).toContain('t'.repeat(20_000));
    expect(text).toContain('- turn 1: replied "I could not decide."');
    expect(text).toContain('- turn 2: given "Your last reply was not a valid envelope."; replied "Thinking it over again and again."');
    expect(text).toContain('- turn 3: given "Try again."; replied step success');
  });

  it('a hostile harness cannot make the replay grow: a huge first reply is digested, a reply naming thousands of actions makes one short line', () => {
    const entries: ConversationEntry[] = [
      { role: 'user', text: 'The task.' },
      { role: 'assistant', text: `{"step":"actions","actions":[${Array.from({ length: 5_000 }, (_, i) => `{"name":"act${i}"}`).join(',')}]} ${'z'.repeat(2_000_000)}` },
      ...conversation(3).slice(2),
    ];
    const text = formatReplay(entries, 'next', 4_000);
    expect(replayTokens(text)).toBeLessThanOrEqual(4_000);
    expect(text).toContain('The task.');
    expect(text).not.toContain('zzzz');
    expect(text).toContain('- turn 1: replied step actions (act0, act1, act2, act3, act4, act5, act6, act7, … 4992 more)');
  });

  it('the default budget is well under common context sizes', () => {
    expect(DEFAULT_REPLAY_MAX_TOKENS).toBe(24_000);
    expect(replayTokens(formatReplay(conversation(2_000), 'next'))).toBeLessThanOrEqual(DEFAULT_REPLAY_MAX_TOKENS);
  });
});
