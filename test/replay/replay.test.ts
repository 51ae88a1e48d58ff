/**
 * The replay suite: every checked-in history (test/replay/histories) is replayed against today's workflow code.
 * A change to the workflow's command sequence that is not behind a patch (docs/VERSIONING.md) fails here, before
 * it can break runs in flight. Re-record with `npm run record-histories` (see README.md beside this file).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import { describe, expect, inject, it } from 'vitest';
import { scenarios } from './scenarios.js';

const dir = path.join(import.meta.dirname, 'histories');
/** Histories of the current command sequence (`NAME.before-<patch>.json`: of the sequence before a patch, kept until it is deprecated). */
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();

describe('replay of recorded histories against the current workflow code', () => {
  it('has a history for every scenario', () => {
    for (const s of scenarios) expect(files, `no history for scenario ${s.name}: run npm run record-histories`).toContain(`replay-${s.name}.json`);
  });

  for (const file of files) {
    it(file, async () => {
      const history = historyFromJSON(JSON.parse(readFileSync(path.join(dir, file), 'utf8')));
      // The run's own id (child ids derive from it): without the execution number and a `.before-<patch>` tag.
      const workflowId = path.basename(file).replace(/(\.before-[\w-]+)?(\.\d+)?\.json$/, '');
      await Worker.runReplayHistory({ workflowBundle: { codePath: inject('workflowBundlePath') }, replayName: 'durable-harness replay suite' }, history, workflowId);
    });
  }
});
