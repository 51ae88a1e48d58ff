/**
 * Only an authenticated operator decides (issue 19), through real runs on the real dev server: a worker in a
 * `signed` deployment takes a decision only when a configured operator with the right role signed exactly it, for
 * this run, this request and this action, recently and once. Everything else — a raw update from any Temporal
 * client, a self-made key, another operator's role, an edit changed after signing, a signature replayed to another
 * run, request or action, an expired one — is refused with its reason and changes nothing: the request stays
 * pending and decidable. The turn's own notifications are not controls: a spoofed one changes nothing either.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LedgerBlobStore } from '../../src/blobs/index.js';
import { RunRejectedError, type AgentRunHandle } from '../../src/client/index.js';
import { generateOperatorKey, parseOperators, signDecision, signerFromKeyFile, textDigest, type DecisionTarget } from '../../src/operators/index.js';
import { approveUpdate, replyUpdate, retryTurnUpdate } from '../../src/workflows/messages.js';
import { ok, scriptBook, scriptedCatalog } from '../support/scripted.js';
import { startTestWorker, testWorkflowId, type TestWorker } from '../support/worker.js';

const book = scriptBook();
const aliceKey = generateOperatorKey('alice');
const bobKey = generateOperatorKey('bob');
const alice = signerFromKeyFile(JSON.stringify(aliceKey), 'alice');
const bob = signerFromKeyFile(JSON.stringify(bobKey), 'bob');
// A key nobody configured, claiming a configured operator's name.
const mallory = signerFromKeyFile(JSON.stringify({ ...generateOperatorKey('mallory'), operator: 'alice' }), 'mallory');
const operators = parseOperators(
  JSON.stringify({
    operators: [
      { name: 'alice', roles: ['approve', 'operate'], keys: [aliceKey.publicKey] },
      { name: 'bob', roles: ['operate'], keys: [bobKey.publicKey] },
    ],
  }),
  'operators.json',
);
const agent = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  harness: 'scripted',
  actions: ['echo'],
  permissions: { posture: 'strict', approvalTimeoutMs: 600_000 },
  // A signed deployment gives a local harness no host network (docs/SECURITY.md).
  sandbox: { provider: 'local', networkPolicy: 'none' },
  ...extra,
});
const catalog = scriptedCatalog(book, { agents: [agent('guarded'), agent('fragile', { turnAttempts: 1, operatorTimeoutMs: 600_000 })] });
let w: TestWorker;

beforeAll(async () => {
  w = await startTestWorker({ catalog, decisions: 'signed', operators });
});
afterAll(() => w?.close());

const touch = (file: string) => ({ tool: 'Bash', kind: 'command', input: { command: `touch ${file}` }, title: `touch ${file}` });

async function pendingOf(run: AgentRunHandle, count = 1) {
  await expect.poll(async () => (await run.status()).pendingApprovals?.length ?? 0, { timeout: 20_000, interval: 100 }).toBe(count);
  return (await run.status()).pendingApprovals!;
}

async function targetOf(run: AgentRunHandle): Promise<DecisionTarget> {
  const d = await run.handle.describe();
  return { namespace: 'default', workflowId: run.workflowId, runId: d.raw.workflowExecutionInfo!.firstRunId! };
}

/** An update's refusal: its failure type and message, from whatever the client raised. */
async function refusal(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'the decision was taken, and should not have been').toBeDefined();
  // The update's own failure (an ApplicationFailure with a type) is somewhere down the client's cause chain.
  let failure = err as { type?: string; message: string; cause?: unknown } | undefined;
  while (failure && failure.type === undefined) failure = failure.cause as typeof failure;
  return failure ? `${failure.type}: ${failure.message}` : `${(err as Error).name}: ${(err as Error).message}`;
}

describe('a signed deployment', () => {
  it('refuses every decision but one a configured operator signed for exactly it, and records who', async () => {
    const run = await w.start({ agent: 'guarded', task: book.write('signed-approve', [{ permissions: [touch('a.txt')], ...ok('approved') }]), workflowId: testWorkflowId('signed-approve') });
    // Another run asking the same thing: its request has the same id (ids are no capability; the signature is).
    const other = await w.start({ agent: 'guarded', task: book.write('signed-other', [{ permissions: [touch('a.txt')], ...ok('other') }]), workflowId: testWorkflowId('signed-other') });
    const [pending] = await pendingOf(run);
    const [otherPending] = await pendingOf(other);
    expect(otherPending!.requestId).toBe(pending!.requestId);
    const target = await targetOf(run);
    expect((await run.status()).policy?.decisions).toBe('signed');

    // Any Temporal client, with any name and a widened scope, unsigned: refused, recorded as nothing.
    const raw = run.handle.executeUpdate(approveUpdate, { args: [{ requestId: pending!.requestId, by: 'security-officer', scope: 'session' }] });
    expect(await refusal(raw)).toMatch(/^DecisionUnsigned: this deployment accepts only signed operator decisions/);
    await expect(run.approve(pending!.requestId, { by: 'security-officer' })).rejects.toThrow(RunRejectedError);

    // A self-made key under a configured name; an operator without the approve role.
    expect(await refusal(run.signedBy(mallory).approve(pending!.requestId))).toMatch(/^DecisionOperatorUnknown: key \w+ is not one of operator "alice"'s configured keys/);
    expect(await refusal(run.signedBy(bob).approve(pending!.requestId))).toMatch(/^DecisionRoleMissing: operator "bob" may not approve/);

    // Alice's own signature, tampered with or sent where it was not meant to go.
    const signed = signDecision(alice, target, { action: 'approve', requestId: pending!.requestId, edit: { command: 'touch a.txt' } });
    const send = (request: unknown, to: AgentRunHandle = run) => to.handle.executeUpdate(approveUpdate, { args: [request as never] });
    expect(await refusal(send({ signed: { ...signed, claim: { ...signed.claim, edit: { command: 'rm -rf ~' } } } }))).toMatch(/^DecisionSignatureInvalid:/);
    expect(await refusal(send({ signed: { ...signed, claim: { ...signed.claim, scope: 'session' } } }))).toMatch(/^DecisionSignatureInvalid:/);
    expect(await refusal(send({ requestId: otherPending!.requestId, signed }, other))).toMatch(/^DecisionMismatch: the decision was signed for workflowId/);
    const forDeny = run.handle.executeUpdate('deny', { args: [{ requestId: pending!.requestId, signed }] });
    expect(await refusal(forDeny)).toMatch(/^DecisionMismatch: the decision was signed for action "approve", not "deny"/);
    const stale = signDecision(alice, target, { action: 'approve', requestId: pending!.requestId }, { nowMs: Date.now() - 20 * 60_000 });
    expect(await refusal(send({ signed: stale }))).toMatch(/^DecisionExpired: the decision expired/);
    // A signature for another request of this run is for that request: it never decides this one.
    const forOther = signDecision(alice, target, { action: 'approve', requestId: 't1-0000000000' });
    expect(await refusal(send({ requestId: pending!.requestId, signed: forOther }))).toMatch(/no pending permission request "t1-0000000000"/);

    // After all that, nothing changed: the request is still pending, its ledger row too, and no decision recorded.
    expect((await run.status()).pendingApprovals!.map((p) => p.requestId)).toEqual([pending!.requestId]);
    expect(await w.ledger.getApproval(run.workflowId, pending!.requestId)).toMatchObject({ status: 'pending' });
    expect(await w.ledger.listDecisions(run.workflowId)).toEqual([]);

    // The one that counts.
    await expect(run.signedBy(alice).approve(pending!.requestId, { scope: 'once' })).resolves.toMatchObject({ status: 'allowed', decidedBy: 'operator:alice' });
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'approved' });
    expect(await w.ledger.getApproval(run.workflowId, pending!.requestId)).toMatchObject({ status: 'allowed', decidedBy: 'operator:alice' });
    const decisions = await w.ledger.listDecisions(run.workflowId);
    expect(decisions.map((d) => [d.action, d.requestId, d.principal, d.keyId, d.authenticated])).toEqual([['approve', pending!.requestId, 'operator:alice', aliceKey.keyId, true]]);
    await other.signedBy(alice).cancel('test done');
  });

  it('a signed reply counts once: the same signature sent again is refused, even for the next question', async () => {
    const task = book.write('signed-reply', [{ envelope: { step: 'chat', message: 'first?' } }, { envelope: { step: 'chat', message: 'second?' } }, ok('two answers')]);
    const run = await w.start({ agent: 'guarded', task, workflowId: testWorkflowId('signed-reply') });
    await expect.poll(async () => (await run.status()).state, { timeout: 20_000, interval: 100 }).toBe('waiting_for_reply');
    expect(await refusal(run.reply('unsigned'))).toMatch(/DecisionUnsigned/);
    const target = await targetOf(run);
    const signed = signDecision(bob, target, { action: 'reply', textSha256: textDigest('yes') });
    // The text beside the signature is what was signed, or nothing happens.
    expect(await refusal(run.handle.executeUpdate(replyUpdate, { args: [{ text: 'no', signed }] }))).toMatch(/^DecisionMismatch: the reply differs from the text that was signed/);
    await expect(run.handle.executeUpdate(replyUpdate, { args: [{ text: 'yes', signed }] })).resolves.toBe('reply accepted');
    await expect.poll(async () => (await run.status()).pendingQuestion, { timeout: 20_000, interval: 100 }).toMatch(/second\?/);
    expect(await refusal(run.handle.executeUpdate(replyUpdate, { args: [{ text: 'yes', signed }] }))).toMatch(/^DecisionReplayed:/);
    // A long reply travels by reference; the signature names the whole text, which is also the reference's key.
    await expect(run.signedBy(bob).reply(`yes again ${'x'.repeat(40_000)}`, { blobs: new LedgerBlobStore(w.ledger) })).resolves.toBe('reply accepted');
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded' });
  });

  it('retry, abandon and cancel need the operate role and a signature; unsigned signals change nothing', async () => {
    const run = await w.start({ agent: 'fragile', task: book.write('signed-retry', [{ failTimes: 2, ...ok('retried') }]), workflowId: testWorkflowId('signed-retry') });
    await expect.poll(async () => (await run.status()).state, { timeout: 30_000, interval: 100 }).toBe('awaiting_operator');
    await run.handle.signal('retryTurn');
    await run.handle.signal('abandon', 'by a stranger');
    expect(await refusal(run.handle.executeUpdate(retryTurnUpdate, { args: [{}] }))).toMatch(/DecisionUnsigned/);
    expect((await run.status()).state).toBe('awaiting_operator');
    await expect(run.signedBy(bob).retryTurn()).resolves.toBe('retrying the failed turn');
    await expect.poll(async () => (await run.status()).state, { timeout: 30_000, interval: 100 }).toBe('awaiting_operator');
    await expect(run.signedBy(alice).abandon('enough')).resolves.toMatch(/abandoned/);
    await expect(run.result()).resolves.toMatchObject({ status: 'failed' });

    const long = await w.start({ agent: 'guarded', task: book.write('signed-cancel', [{ sleepMs: 120_000, ...ok() }]), workflowId: testWorkflowId('signed-cancel') });
    await expect.poll(async () => (await long.status()).state, { timeout: 20_000, interval: 100 }).toBe('running');
    await long.handle.signal('cancel', 'unsigned');
    await new Promise((r) => setTimeout(r, 1000));
    expect((await long.status()).state).toBe('running');
    await long.signedBy(bob).cancel('signed stop');
    await expect(long.result()).resolves.toMatchObject({ status: 'cancelled' });
    expect((await w.ledger.listDecisions(long.workflowId)).map((d) => [d.action, d.principal])).toEqual([['cancel', 'operator:bob']]);
  });

  it("a spoofed notification of the turn's changes nothing: the request stays pending and decidable", async () => {
    const run = await w.start({ agent: 'guarded', task: book.write('signed-spoof', [{ permissions: [touch('c.txt')], ...ok('still decided by alice') }]), workflowId: testWorkflowId('signed-spoof') });
    const [pending] = await pendingOf(run);
    // What the UI's signal picker (or a raw client) could send: a settlement nobody made, a request nobody asked.
    await run.handle.signal('approvalSettled', { requestId: pending!.requestId, status: 'allowed', by: 'operator:security-officer' });
    await run.handle.signal('approvalRequested', { requestId: 't1-forged00000', turn: 1, tool: 'Bash', kind: 'command', title: 'rm -rf /', since: new Date().toISOString(), timeoutMs: 1 });
    await new Promise((r) => setTimeout(r, 1000));
    expect((await run.status()).pendingApprovals!.map((p) => p.requestId)).toEqual([pending!.requestId]);
    expect(await w.ledger.getApproval(run.workflowId, pending!.requestId)).toMatchObject({ status: 'pending' });
    // The internal notifications are not offered as operator controls: only the operator's messages have handlers.
    const metadata = await run.handle.query<{ definition?: { signalDefinitions?: { name: string; description?: string }[]; updateDefinitions?: { name: string; description?: string }[] } }>('__temporal_workflow_metadata');
    const signals = metadata.definition!.signalDefinitions!.map((d) => d.name);
    expect(signals).not.toContain('approvalSettled');
    expect(signals).not.toContain('approvalRequested');
    for (const d of [...metadata.definition!.signalDefinitions!, ...metadata.definition!.updateDefinitions!]) expect(d.description, `${d.name} has a description`).toBeTruthy();
    await expect(run.signedBy(alice).approve(pending!.requestId)).resolves.toMatchObject({ status: 'allowed', decidedBy: 'operator:alice' });
    await expect(run.result()).resolves.toMatchObject({ status: 'succeeded', result: 'still decided by alice' });
  });
});
