/**
 * Progress events are the live view, not accounting: what a harness streams is rate-capped per turn, and whatever
 * was dropped (by the cap or a full queue) is counted in one event at the end of the turn, so the operator knows.
 */
import { expect, it } from 'vitest';
import { ProgressEvents, progressEventsBurst, progressEventsPerSecond } from '../../src/activities/turn/progress-events.js';
import type { Ledger } from '../../src/ledger/index.js';

function recordingLedger() {
  const rows: { type: string; data: unknown }[] = [];
  const ledger = { appendEvent: async (_w: string, _t: number, type: string, data: unknown) => void rows.push({ type, data }) } as unknown as Ledger;
  return { ledger, rows };
}

it('10,000 progress events at once: a burst is written, the rest counted in one progress-events-dropped event', async () => {
  const { ledger, rows } = recordingLedger();
  const events = new ProgressEvents(ledger, { workflowId: 'w', turn: 1 }, { maxQueued: 100_000 });
  for (let i = 0; i < 10_000; i++) events.progress('activity', { i });
  events.append('turn-complete', { text: 'done' }); // never rate-capped
  await events.close(2000);
  const activities = rows.filter((r) => r.type === 'activity');
  // The bucket refills while the loop runs: a few more than the burst at most.
  expect(activities.length).toBeGreaterThanOrEqual(progressEventsBurst);
  expect(activities.length).toBeLessThan(progressEventsBurst + progressEventsPerSecond);
  expect(rows.filter((r) => r.type === 'turn-complete')).toHaveLength(1);
  expect(rows.filter((r) => r.type === 'progress-events-dropped').map((r) => r.data)).toEqual([
    { count: 10_000 - activities.length, byRateCap: 10_000 - activities.length, perSecond: progressEventsPerSecond, burst: progressEventsBurst },
  ]);
});

it('a turn within the rate writes every event and no dropped count', async () => {
  const { ledger, rows } = recordingLedger();
  const events = new ProgressEvents(ledger, { workflowId: 'w', turn: 1 });
  for (let i = 0; i < 50; i++) events.progress('activity', { i });
  await events.close(2000);
  expect(rows.map((r) => r.type)).toEqual(Array.from({ length: 50 }, () => 'activity'));
});
