/** The command line's pure parts: escaping, exit codes, list queries, poller identities, the operator log. */
import { describe, expect, it } from 'vitest';
import { parseCatalog } from '../../src/catalog/index.js';
import { catalogHash } from '../../src/catalog/hash.js';
import { escapeControl } from '../../src/cli/escape.js';
import { exitCodeForResult, exitCodeForState } from '../../src/cli/exit-codes.js';
import { listQuery } from '../../src/cli/list.js';
import { OperatorLog } from '../../src/cli/operator-log.js';
import { conflictingPollers, livePollers, parseIdentity, workerIdentity } from '../../src/temporal/task-queue.js';
import { FailureTypes as ActivityFailureTypes } from '../../src/contracts/failures.js';
import { FailureTypes, failureTypes } from '../../src/contracts/failures.js';
import { roundUsd } from '../../src/contracts/money.js';

describe('escapeControl', () => {
  it('makes control characters and bidi overrides visible, and leaves other text alone', () => {
    expect(escapeControl('a\nb\tc\rd')).toBe('a\\nb\\tc\\rd');
    expect(escapeControl('\u001b[2J\u0007\u007f\u009b')).toBe('\\x1b[2J\\x07\\x7f\\x9b');
    expect(escapeControl('abc\u202edcba\u2066')).toBe('abc\\u202edcba\\u2066');
    expect(escapeControl('plain · ünïcode ✓ $0.0023')).toBe('plain · ünïcode ✓ $0.0023');
  });
});

describe('exit codes', () => {
  it('maps outcomes, configuration failures and waiting states', () => {
    expect(exitCodeForResult({ status: 'succeeded' })).toBe(0);
    expect(exitCodeForResult({ status: 'failed', failureType: 'TurnFailed' })).toBe(10);
    expect(exitCodeForResult({ status: 'failed', failureType: 'UnknownAgent' })).toBe(2);
    expect(exitCodeForResult({ status: 'failed', failureType: 'CredentialMissing' })).toBe(2);
    expect(exitCodeForResult({ status: 'stopped' })).toBe(11);
    expect(exitCodeForResult({ status: 'cancelled' })).toBe(12);
    expect(exitCodeForState('running')).toBe(0);
    expect(exitCodeForState('awaiting_operator')).toBe(13);
    expect(exitCodeForState('waiting_for_reply')).toBe(14);
  });
});

describe('failure types', () => {
  const configuration = Object.entries(failureTypes).filter(([, t]) => t.configuration).map(([type]) => type);

  it('every configuration failure type of the one list exits 2; every other failure exits 10', () => {
    expect(configuration).toEqual(expect.arrayContaining(['PermissionHooksMissing', 'WorkspaceScopeInvalid', 'SandboxIsolationUnavailable', 'UnknownAgent', 'CredentialMissing']));
    for (const [type, { configuration: config }] of Object.entries(failureTypes)) {
      expect(exitCodeForResult({ status: 'failed', failureType: type }), type).toBe(config ? 2 : 10);
    }
    expect(exitCodeForResult({ status: 'failed', failureType: 'SomethingNew' })).toBe(10);
  });

  it('the activities and the workflow name the same types', () => {
    expect(ActivityFailureTypes).toBe(FailureTypes);
    for (const type of Object.keys(failureTypes)) expect(FailureTypes[type as keyof typeof FailureTypes]).toBe(type);
  });
});

describe('money', () => {
  it('rounds to micro-dollars', () => {
    expect(roundUsd(0.00018899999999999999)).toBe(0.000189);
    expect(roundUsd(0.1 + 0.2)).toBe(0.3);
    expect(roundUsd(0)).toBe(0);
  });
});

describe('list query', () => {
  it('filters by the run attributes', () => {
    expect(listQuery({})).toBe(`WorkflowType = 'agentRun'`);
    expect(listQuery({ status: 'failed', agent: 'demo', tenant: 'acme' })).toBe(
      `WorkflowType = 'agentRun' AND DurableHarnessStatus = 'failed' AND DurableHarnessAgent = 'demo' AND DurableHarnessTenant = 'acme'`,
    );
    expect(() => listQuery({ tenant: "x' OR 'y" })).toThrow(/cannot contain quotes/);
  });

  it('an open state matches open runs only (a terminated run keeps the state it was in); terminated and timed-out runs by Temporal status', () => {
    expect(listQuery({ status: 'running' })).toBe(`WorkflowType = 'agentRun' AND DurableHarnessStatus = 'running' AND ExecutionStatus = 'Running'`);
    expect(listQuery({ status: 'terminated' })).toBe(`WorkflowType = 'agentRun' AND ExecutionStatus = 'Terminated'`);
    expect(listQuery({ status: 'timed_out', agent: 'demo' })).toBe(`WorkflowType = 'agentRun' AND ExecutionStatus = 'TimedOut' AND DurableHarnessAgent = 'demo'`);
  });
});

describe('worker identities and catalogs', () => {
  const catalog = parseCatalog({ harnesses: [], agents: [], actions: [] }, 'empty');
  it('hashes the parsed catalog, not its formatting', () => {
    const a = parseCatalog({ agents: [], harnesses: [], actions: [] }, 'reordered');
    expect(catalogHash(a)).toBe(catalogHash(catalog));
    expect(catalogHash(catalog)).toMatch(/^[0-9a-f]{12}$/);
    const other = parseCatalog({ harnesses: [], agents: [], actions: [{ name: 'echo' }] }, 'other');
    expect(catalogHash(other)).not.toBe(catalogHash(catalog));
  });

  it('parses process, host and catalog out of an identity', () => {
    expect(parseIdentity(workerIdentity('abcdef123456', 'durable-harness/42@box'))).toEqual({ pid: 42, host: 'box', catalog: 'abcdef123456' });
    expect(parseIdentity('42@box')).toEqual({ pid: 42, host: 'box', catalog: undefined });
  });

  it('a poller counts as alive (maybe busy) unless it has not polled for 90 s or is a process of this host that is gone', () => {
    const now = 1_000_000;
    const here = { hostname: 'box', alive: (pid: number) => pid === 7 };
    const poller = (identity: string, ageMs?: number) => ({ identity, kinds: ['workflow' as const], ...(ageMs !== undefined ? { lastAccessMs: now - ageMs } : {}) });
    const live = livePollers(
      [poller('durable-harness/7@box catalog:abcdef', 50_000), poller('durable-harness/8@box catalog:abcdef', 1000), poller('9@other-host', 89_000), poller('9@far-host', 91_000), poller('host-h1/12', 5000), poller('7@box')],
      now,
      here,
    ).map((p) => p.identity);
    expect(live).toEqual(['durable-harness/7@box catalog:abcdef', '9@other-host', 'host-h1/12', '7@box']);
  });

  it('counts live workers with another catalog, not stale ones from this host or foreign identities', () => {
    const here = { hostname: 'box', pid: 100, alive: (pid: number) => pid === 7 };
    const poller = (identity: string) => ({ identity, kinds: ['workflow' as const] });
    const pollers = [
      poller('durable-harness/7@box catalog:aaaaaaaaaaaa'), // same catalog
      poller('durable-harness/7@box catalog:bbbbbbbbbbbb'), // live, other catalog: conflict
      poller('durable-harness/8@box catalog:bbbbbbbbbbbb'), // dead process on this host: stale
      poller('durable-harness/100@box catalog:bbbbbbbbbbbb'), // this very process's earlier life (e.g. a restarted container)
      poller('durable-harness/9@elsewhere catalog:cccccccccccc'), // another host: cannot tell, counts
      poller('1234@some-other-worker'), // no catalog marker: not ours to judge
    ];
    expect(conflictingPollers(pollers, 'aaaaaaaaaaaa', here).map((p) => p.identity)).toEqual([
      'durable-harness/7@box catalog:bbbbbbbbbbbb',
      'durable-harness/9@elsewhere catalog:cccccccccccc',
    ]);
  });
});

describe('operator log', () => {
  it('one line per run start and end, one short line per failed attempt, nothing else below WARN', async () => {
    const lines: string[] = [];
    const log = new OperatorLog({ write: (l) => lines.push(l), now: () => new Date('2026-01-01T10:11:12Z'), describeEnd: async () => 'succeeded after 2 turn(s)' });
    const run = { workflowId: 'run-1', runId: 'r', workflowType: 'agentRun' };
    log.debug('Workflow started', run);
    log.debug('Activity started', { ...run, activityType: 'runTurn' });
    const error = Object.assign(new Error('turn failed (process-exit): exited 1\nstderr line\nmore'), { type: 'TurnFailed', stack: 'Error: …\n    at x (y.js:1:1)' });
    log.warn('Activity failed', { ...run, activityType: 'runTurn', attempt: 1, taskToken: 'c2VjcmV0', error });
    log.debug('Workflow completed', run);
    log.warn('Workflow failed', { workflowId: 'other', workflowType: 'somethingElse', error });
    log.warn('Something odd', { error: new Error('first\nsecond') });
    // The host queue's worker polls activities only: not a warning an operator acts on.
    log.warn('No workflows registered, not polling for workflow tasks', { taskQueue: 'durable-harness@host' });
    await new Promise((r) => setTimeout(r, 0));
    expect(lines).toEqual([
      '10:11:12 run run-1 started',
      '10:11:12 run run-1: runTurn attempt 1 failed (TurnFailed): turn failed (process-exit): exited 1',
      '10:11:12 warn: Something odd: first',
      '10:11:12 run run-1 succeeded after 2 turn(s)',
    ]);
  });
});
