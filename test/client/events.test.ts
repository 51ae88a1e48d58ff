/**
 * The run-event follower over a source held in memory: tool use typed from each adapter's activity lines, a run
 * Temporal closed without an end row still ends the follow, pages follow one another without a gap, and a cursor
 * no event gave is refused.
 */
import { describe, expect, it } from 'vitest';
import { followRunEvents, ledgerCursor, runEventOf, toolUseOf, type RunEvent, type RunEventSource, type StoredEvent } from '../../src/client/events.js';

function memorySource(rows: StoredEvent[]): RunEventSource & { reads: number } {
  const source = {
    reads: 0,
    delay: 'none',
    read: async (_w: string, after: number, limit: number) => {
      source.reads += 1;
      return rows.filter((r) => r.cursor > after).slice(0, limit);
    },
    wait: async () => new Promise<void>((r) => setTimeout(r, 5)),
  };
  return source;
}

const row = (cursor: number, type: string, data: unknown): StoredEvent => ({ cursor, turn: 1, type, data, at: new Date(0).toISOString() });

describe('tool use from activity lines', () => {
  it.each([
    ['Bash {"command":"npm test"}', { name: 'Bash', kind: 'command', target: 'npm test' }], // claude
    ['Write {"file_path":"/w/a.txt","content":"x"}', { name: 'Write', kind: 'edit', target: '/w/a.txt' }], // claude
    ['read_file {"absolute_path":"/w/README.md"}', { name: 'read_file', kind: 'read', target: '/w/README.md' }], // gemini
    ['bash {"command":"ls"}', { name: 'bash', kind: 'command', target: 'ls' }], // pi
    ['command: git status → completed (exit 0)', { name: 'command', kind: 'command', target: 'git status' }], // codex
    ['file change: add src/a.ts, update README.md', { name: 'file change', kind: 'edit', target: 'add src/a.ts, update README.md' }], // codex
  ])('%s', (description, tool) => {
    expect(toolUseOf(description)).toEqual(tool);
    expect(runEventOf(row(1, 'activity', { description }))).toMatchObject({ type: 'activity', description, tool });
  });

  it('a line that names no tool stays plain activity', () => {
    expect(runEventOf(row(1, 'activity', { description: 'reasoning' }))).toEqual({ cursor: '1', at: new Date(0).toISOString(), turn: 1, type: 'activity', description: 'reasoning' });
    expect(toolUseOf('Bash {not json}')).toBeUndefined();
  });

  it('a decision names the request it decided', () => {
    expect(runEventOf(row(3, 'permission-decision', { id: 'p1', tool: 'Bash', decision: 'deny', decidedBy: 'operator:alice', approvalId: 't1-abc', edited: false, message: 'no' }))).toMatchObject({
      type: 'approval-decided',
      tool: 'Bash',
      decision: 'deny',
      decidedBy: 'operator:alice',
      requestId: 't1-abc',
      message: 'no',
    });
  });

  it('a permission request is typed from its own fields', () => {
    expect(runEventOf(row(2, 'permission-request', { tool: 'Bash', kind: 'command', title: 'rm -rf /', command: 'rm -rf /', input: {} }))).toMatchObject({
      type: 'approval-requested',
      tool: { name: 'Bash', kind: 'command', target: 'rm -rf /' },
      title: 'rm -rf /',
    });
  });
});

describe('followRunEvents', () => {
  it('reads page after page in cursor order, from after `since`, and ends after the end row', async () => {
    const rows = [...Array(250).keys()].map((i) => row(i + 1, 'activity', { description: `a${i + 1}` }));
    rows.push(row(251, 'end', { status: 'failed', reason: 'r', failureType: 'ConfigurationError' }), row(252, 'activity', { description: 'after the end' }));
    const seen: RunEvent[] = [];
    for await (const e of followRunEvents(memorySource(rows), 'wf', { since: '7' })) seen.push(e);
    expect(seen.map((e) => e.cursor)).toEqual([...Array(244).keys()].map((i) => String(i + 8)));
    expect(seen.at(-1)).toEqual({ cursor: '251', at: new Date(0).toISOString(), turn: 1, type: 'end', status: 'failed', reason: 'r', failureType: 'ConfigurationError' });
  });

  it('a run Temporal closed without an end row ends the follow from Temporal, after the rows it has', async () => {
    const source = memorySource([row(1, 'activity', { description: 'x' })]);
    const seen: RunEvent[] = [];
    let asked = 0;
    const closed = async () => (++asked >= 2 ? { status: 'terminated', reason: 'terminated in Temporal' } : undefined);
    for await (const e of followRunEvents(source, 'wf', { closed, closedCheckMs: 20 })) seen.push(e);
    expect(seen.map((e) => e.type)).toEqual(['activity', 'end']);
    expect(seen[1]).toMatchObject({ type: 'end', status: 'terminated', source: 'temporal', cursor: '1' });
  });

  it('stops when its signal aborts, and at the end of what is stored with follow: false', async () => {
    const stop = new AbortController();
    const seen: RunEvent[] = [];
    setTimeout(() => stop.abort(), 50);
    for await (const e of followRunEvents(memorySource([row(1, 'retry', { attempt: 2 })]), 'wf', { signal: stop.signal })) seen.push(e);
    expect(seen).toMatchObject([{ type: 'retry', attempt: 2 }]);
    const stored: RunEvent[] = [];
    for await (const e of followRunEvents(memorySource([row(1, 'retry', { attempt: 2 })]), 'wf', { follow: false })) stored.push(e);
    expect(stored).toHaveLength(1);
  });

  it('refuses a cursor that no event gave', () => {
    expect(ledgerCursor('42')).toBe(42);
    expect(() => ledgerCursor('temporal:3')).toThrow(/is not one an event gave: a ledger cursor is a whole number/);
    expect(() => ledgerCursor('-1')).toThrow(RangeError);
  });
});
