/** The uid table of `sandbox.options.userRange`: parsing, one stable uid per workspace, accounts and 65534 skipped. */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkSharedUid, parseUidRange, ScopeUids } from '../../src/sandbox/scope-users.js';

describe('parseUidRange', () => {
  it('takes "first-last" at or above 10000, and refuses the rest with what to write', () => {
    expect(parseUidRange(undefined)).toBeUndefined();
    expect(parseUidRange({ userRange: '70000-70009' })).toEqual({ first: 70_000, last: 70_009 });
    for (const bad of ['1000-2000', '70010-70000', '70000', 70_000, '70000-99999999999']) {
      expect(() => parseUidRange({ userRange: bad })).toThrow(/Invalid sandbox option userRange=.*e\.g\. "70000-79999"/);
    }
    expect(() => parseUidRange({ userRange: '70000-70009', user: '70000:70000' })).toThrow(/both set/);
  });

  it('refuses one fixed uid for every tenant only where tenants share the agent', () => {
    expect(() => checkSharedUid('agent-user', { user: '71200:71200' })).toThrow(expect.objectContaining({ code: 'WorkspaceScopeInvalid' }));
    expect(() => checkSharedUid('run', { user: '71200:71200' })).not.toThrow();
    expect(() => checkSharedUid('agent-user', { userRange: '70000-70009' })).not.toThrow();
  });
});

describe('ScopeUids', () => {
  it('gives each workspace its own uid, the same one again (also to another process), and refuses a used-up range', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-uids-'));
    const range = { first: 65_533, last: 65_536 }; // 65534 (nobody) is never handed out
    const uids = new ScopeUids(dir);
    const [a, b, c] = await Promise.all(['agent-users/x/acme/alice', 'agent-users/x/globex/bob', 'runs/r1'].map((key) => uids.uidFor(key, range)));
    expect(new Set([a, b, c]).size).toBe(3);
    expect([a, b, c]).not.toContain(65_534);
    expect(await new ScopeUids(dir).uidFor('agent-users/x/acme/alice', range)).toBe(a);
    await expect(uids.uidFor('runs/r2', range)).rejects.toThrow(/userRange=65533-65536 is used up/);
    expect(JSON.parse(readFileSync(path.join(dir, 'uids.json'), 'utf8'))).toEqual({ 'agent-users/x/acme/alice': a, 'agent-users/x/globex/bob': b, 'runs/r1': c });
  });

  it('stops at a broken table rather than hand out uids that may be in use', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-uids-'));
    writeFileSync(path.join(dir, 'uids.json'), '{not json');
    await expect(new ScopeUids(dir).uidFor('runs/r1', { first: 70_000, last: 70_009 })).rejects.toThrow(/cannot be read .* repair or remove it/);
  });
});
