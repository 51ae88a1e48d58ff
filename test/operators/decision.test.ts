/** Signed operator decisions: what a configured operator signs verifies, and every forgery or replay is refused with its reason. */
import { chmodSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  DecisionRefusals,
  DecisionRefusedError,
  MAX_DECISION_TTL_MS,
  decisionModeFromEnvironment,
  generateOperatorKey,
  operatorSignerFrom,
  operatorsFromEnvironment,
  parseOperators,
  signDecision,
  signerFromKeyFile,
  verifyDecision,
  writeOperatorKeyFile,
  type DecisionTarget,
  type OperatorDirectory,
  type SignedDecision,
} from '../../src/operators/index.js';

const alice = generateOperatorKey('alice');
const bob = generateOperatorKey('bob');
const mallory = generateOperatorKey('mallory');
const directory: OperatorDirectory = parseOperators(
  `operators:\n  - name: alice\n    roles: [approve, operate]\n    keys: ["${alice.publicKey}"]\n  - name: bob\n    roles: [operate]\n    keys: ["${bob.publicKey}"]\n`,
  'operators.yaml',
);
const target: DecisionTarget = { namespace: 'default', workflowId: 'run-1', runId: 'first-run-id' };
const asAlice = signerFromKeyFile(JSON.stringify(alice), 'alice.json');
const now = Date.parse('2026-12-01T12:00:00Z');

function refusal(fn: () => unknown): { type: string; message: string } {
  try {
    fn();
  } catch (err) {
    if (err instanceof DecisionRefusedError) return { type: err.type, message: err.message };
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('a decision signed by a configured operator', () => {
  it('verifies, and names the operator and key', () => {
    const signed = signDecision(asAlice, target, { action: 'approve', requestId: 't1-abc', scope: 'session' }, { nowMs: now });
    const verified = verifyDecision(signed, { ...target, action: 'approve', requestId: 't1-abc' }, directory, now + 1000);
    expect(verified.operator).toBe('alice');
    expect(verified.keyId).toBe(alice.keyId);
    expect(verified.claim.scope).toBe('session');
  });

  it('survives a trip through JSON (how it travels as an update argument)', () => {
    const signed = JSON.parse(JSON.stringify(signDecision(asAlice, target, { action: 'deny', requestId: 'r', reason: 'no' }, { nowMs: now }))) as SignedDecision;
    expect(verifyDecision(signed, { ...target, action: 'deny', requestId: 'r' }, directory, now).operator).toBe('alice');
  });
});

describe('refused, with the reason', () => {
  const approve = signDecision(asAlice, target, { action: 'approve', requestId: 't1-abc', edit: { command: 'ls' } }, { nowMs: now });
  const expect_ = { ...target, action: 'approve' as const, requestId: 't1-abc' };

  it.each([
    ['unsigned (a raw update with no signature)', { requestId: 't1-abc', by: 'security-officer' }, DecisionRefusals.unsigned],
    ['an edit changed after signing', { ...approve, claim: { ...approve.claim, edit: { command: 'rm -rf /' } } }, DecisionRefusals.invalid],
    ['a scope widened after signing', { ...approve, claim: { ...approve.claim, scope: 'session' } }, DecisionRefusals.invalid],
    ['the operator name changed after signing', { ...approve, claim: { ...approve.claim, operator: 'bob', keyId: bob.keyId } }, DecisionRefusals.invalid],
    ['a garbage signature', { ...approve, signature: Buffer.alloc(64, 7).toString('base64') }, DecisionRefusals.invalid],
    ['a malformed nonce', { ...approve, claim: { ...approve.claim, nonce: 'x' } }, DecisionRefusals.invalid],
  ])('%s', (_what, signed, type) => {
    expect(refusal(() => verifyDecision(signed, expect_, directory, now)).type).toBe(type);
  });

  it('signed with a key no operator has (a self-made key claiming a configured name)', () => {
    const forged = signDecision(signerFromKeyFile(JSON.stringify({ ...mallory, operator: 'alice' }), 'm'), target, { action: 'approve', requestId: 't1-abc' }, { nowMs: now });
    const r = refusal(() => verifyDecision(forged, expect_, directory, now));
    expect(r.type).toBe(DecisionRefusals.unknown);
    expect(r.message).toMatch(/is not one of operator "alice"'s configured keys/);
  });

  it('by an operator the worker does not know', () => {
    const stranger = signDecision(signerFromKeyFile(JSON.stringify(mallory), 'm'), target, { action: 'approve', requestId: 't1-abc' }, { nowMs: now });
    expect(refusal(() => verifyDecision(stranger, expect_, directory, now)).message).toMatch(/operator "mallory" is not configured/);
  });

  it.each([
    ['another run of the same workflow id', { ...expect_, runId: 'second-run-id' }, /runId "first-run-id", not "second-run-id"/],
    ['another workflow', { ...expect_, workflowId: 'run-2' }, /workflowId "run-1", not "run-2"/],
    ['another namespace', { ...expect_, namespace: 'prod' }, /namespace "default", not "prod"/],
    ['another request', { ...expect_, requestId: 't1-other' }, /request "t1-abc", not "t1-other"/],
    ['another decision (an approval replayed as a denial)', { ...expect_, action: 'deny' as const }, /action "approve", not "deny"/],
  ])('replayed to %s', (_what, expected, message) => {
    const r = refusal(() => verifyDecision(approve, expected, directory, now));
    expect(r.type).toBe(DecisionRefusals.mismatch);
    expect(r.message).toMatch(message);
  });

  it('expired, or dated in the future', () => {
    expect(refusal(() => verifyDecision(approve, expect_, directory, now + 10 * 60_000)).type).toBe(DecisionRefusals.expired);
    expect(refusal(() => verifyDecision(approve, expect_, directory, now - 5 * 60_000)).type).toBe(DecisionRefusals.expired);
    // A signer cannot stretch its own window: the longest accepted is MAX_DECISION_TTL_MS, whatever it asks for.
    const long = signDecision(asAlice, target, { action: 'approve', requestId: 't1-abc' }, { nowMs: now, ttlMs: 24 * 3600_000 });
    expect(Date.parse(long.claim.expiresAt) - Date.parse(long.claim.issuedAt)).toBe(MAX_DECISION_TTL_MS);
  });

  it('an operator without the role the action needs', () => {
    const asBob = signerFromKeyFile(JSON.stringify(bob), 'bob.json');
    const bobApproves = signDecision(asBob, target, { action: 'approve', requestId: 't1-abc' }, { nowMs: now });
    const r = refusal(() => verifyDecision(bobApproves, expect_, directory, now));
    expect(r.type).toBe(DecisionRefusals.role);
    expect(r.message).toMatch(/"bob" may not approve: that needs the role "approve" \(has operate\)/);
    // bob operates: a retry of his verifies.
    const retry = signDecision(asBob, target, { action: 'retry' }, { nowMs: now });
    expect(verifyDecision(retry, { ...target, action: 'retry' }, directory, now).operator).toBe('bob');
  });
});

describe('configuration', () => {
  it('names every problem of a broken operators file', () => {
    expect(() => parseOperators('operators: [{name: a, roles: [admin], keys: []}]', 'f.yaml')).toThrow(/invalid operators file f\.yaml: operators\.0\.roles\.0: .*; operators\.0\.keys: /);
    expect(() => parseOperators(`operators: [{name: a, roles: [approve], keys: ["ed25519:AAAA"]}]`, 'f.yaml')).toThrow(/expected an Ed25519 public key/);
    expect(() => parseOperators(`operators: [{name: a, roles: [approve], keys: ["${alice.publicKey}"]}, {name: a, roles: [read], keys: ["${bob.publicKey}"]}]`, 'f.yaml')).toThrow(/"a" is given twice/);
    expect(() => operatorsFromEnvironment({ DURABLE_HARNESS_OPERATORS_FILE: '/nonexistent/operators.yaml' })).toThrow(/cannot be read/);
    expect(() => decisionModeFromEnvironment({ DURABLE_HARNESS_DECISIONS: 'open' }, 'signed')).toThrow(/"signed" or "trusted-network"/);
    expect(decisionModeFromEnvironment({}, 'trusted-network')).toBe('trusted-network');
  });

  it('keygen writes a file only its owner can read, never over another, and the command refuses a readable one', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-op-'));
    const file = path.join(dir, 'alice.json');
    writeOperatorKeyFile(file, alice);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(() => writeOperatorKeyFile(file, bob)).toThrow(/exists already/);
    expect(operatorSignerFrom(file, {})!.keyId).toBe(alice.keyId);
    expect(operatorSignerFrom(undefined, { DURABLE_HARNESS_OPERATOR_KEY: readFileSync(file, 'utf8') })!.operator).toBe('alice');
    expect(operatorSignerFrom(undefined, {})).toBeUndefined();
    chmodSync(file, 0o644);
    expect(() => operatorSignerFrom(file, {})).toThrow(/readable by others \(mode 644\); chmod 600 it/);
  });
});
