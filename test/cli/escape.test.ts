/** Terminal output never carries a control character from a user- or harness-supplied field. */
import { describe, expect, it } from 'vitest';
import { escapeControl, escapeText } from '../../src/cli/escape.js';
import { describeResult, progressLine } from '../../src/cli/follow.js';
import type { AgentRunResult, RunStatusView } from '../../src/workflows/types.js';

const forged = 'acme\n2024-fake-run\tsucceeded\tdemo\x1b[2K\x1b[1A\r\u202eevil\u0085\u2028\x00\x7f';

describe('escapeControl', () => {
  it('makes every control character visible, so a field cannot forge a row, a column or a screen', () => {
    const out = escapeControl(forged);
    expect(out).toBe('acme\\n2024-fake-run\\tsucceeded\\tdemo\\x1b[2K\\x1b[1A\\r\\u202eevil\\x85\\u2028\\x00\\x7f');
    expect(out).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u202e]/);
  });

  it('keeps ordinary text', () => {
    expect(escapeControl('tenant-7 · Zoë ✓')).toBe('tenant-7 · Zoë ✓');
    expect(escapeControl('\u200fright-to-left mark, BOM\ufeff, separator\u2029')).toBe('\\u200fright-to-left mark, BOM\\ufeff, separator\\u2029');
  });
});

describe('escapeText', () => {
  it('keeps the lines of free text, escapes everything else', () => {
    expect(escapeText('line 1\n\tline 2\x1b]0;title\x07')).toBe('line 1\n\\tline 2\\x1b]0;title\\x07');
  });
});

describe('what the CLI prints', () => {
  const status = { iteration: 2, totalTokens: 10, costUsd: 0, costBlind: false, state: 'running', detail: `turn 2 · ${forged}` } as unknown as RunStatusView;

  it('status and progress lines are one line whatever the harness reported', () => {
    const line = progressLine(status, 'reading \x1b[31mred\n');
    expect(line.split('\n')).toHaveLength(1);
    expect(line).not.toContain('\x1b');
    expect(line).toContain('\\x1b[31mred\\n');
  });

  it('results keep their lines but lose their escape sequences', () => {
    const result = { status: 'succeeded', iterations: 1, usage: {}, costUsd: 0, result: 'done\n\x1b[2Jcleared' } as unknown as AgentRunResult;
    expect(describeResult(result)).toMatch(/\ndone\n\\x1b\[2Jcleared$/);
  });
});
