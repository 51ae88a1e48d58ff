import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteLedger } from '../../src/ledger/index.js';
import {
  agentPermissionsSchema,
  ApprovalDecisionError,
  approvalIdFor,
  createPermissionGate,
  decidePendingApproval,
  ledgerApprovalBroker,
  type ApprovalBroker,
  type PermissionRequest,
} from '../../src/permissions/index.js';

const ws = '/ws';
const options = { edit: 'emulated', denyMessage: false } as const;
const bash = (command: string, extra: Record<string, unknown> = {}): PermissionRequest => ({
  id: `cli-${Math.random()}`,
  tool: 'bash',
  kind: 'command',
  input: { command, ...extra },
  title: command,
  command,
  options,
});
const write = (file: string): PermissionRequest => ({ id: 'w', tool: 'write', kind: 'edit', input: { path: file, content: 'x' }, title: `write ${file}`, paths: [file], options });

let ledger: SqliteLedger;
beforeEach(() => {
  ledger = SqliteLedger.open(':memory:');
});
afterEach(async () => ledger.close());

const gateFor = (permissions: unknown, broker: ApprovalBroker, turn = 1) =>
  createPermissionGate({ ledger, workflowId: 'wf', turn, policy: agentPermissionsSchema.parse(permissions), workspace: ws, broker });
const refuse: ApprovalBroker = { ask: async () => Promise.reject(new Error('the broker must not be asked')) };
const fastBroker = () => ledgerApprovalBroker({ ledger, pollMs: 10 });

/** Waits until the request is pending in the ledger, then decides it as an operator would. */
async function operator(requestId: string, decision: Parameters<typeof decidePendingApproval>[3]) {
  for (let i = 0; i < 200 && (await ledger.getApproval('wf', requestId))?.status !== 'pending'; i++) await new Promise((r) => setTimeout(r, 10));
  return decidePendingApproval(ledger, 'wf', requestId, decision);
}

describe('permission gate', () => {
  it('records every policy decision with the rule that made it, and never asks a human for those', async () => {
    const gate = gateFor({ posture: 'strict', allow: ['command:ls*'], deny: ['command:rm *'] }, refuse);
    expect(gate.interactive).toBe(true);
    const allowed = await gate.decide(bash('ls -la'));
    expect(allowed).toMatchObject({ decision: 'allow', decidedBy: 'policy:allow[0] command:ls*', approvalId: approvalIdFor(1, bash('ls -la')) });
    const denied = await gate.decide(bash('rm -rf build'));
    expect(denied).toMatchObject({ decision: 'deny', decidedBy: 'policy:deny[0] command:rm *' });
    expect(denied.message).toMatch(/Denied by the agent's permission policy/);
    const rows = await ledger.listApprovals({ workflowId: 'wf' });
    expect(rows.map((r) => [r.command, r.status, r.decidedBy])).toEqual([
      ['ls -la', 'allowed', 'policy:allow[0] command:ls*'],
      ['rm -rf build', 'denied', 'policy:deny[0] command:rm *'],
    ]);
  });

  it('what the policy leaves open waits for an operator, who may edit it; the edit is a patch of the input', async () => {
    const gate = gateFor('strict', fastBroker());
    const request = bash('touch ran.txt', { description: 'make a file' });
    const id = approvalIdFor(1, request);
    const [answer, row] = await Promise.all([gate.decide(request), operator(id, { allow: true, by: 'operator:alice', edit: { command: 'touch edited.txt' } })]);
    expect(row).toMatchObject({ status: 'allowed', decidedBy: 'operator:alice', editedInput: { command: 'touch edited.txt', description: 'make a file' } });
    expect(answer).toMatchObject({ decision: 'allow', decidedBy: 'operator:alice', editedInput: { command: 'touch edited.txt', description: 'make a file' }, approvalId: id });
    // The emulated edit: when the harness asks again with the edited command, it is allowed without asking.
    const again = await gateFor('strict', refuse).decide(bash('touch edited.txt', { description: 'other words' }));
    expect(again).toMatchObject({ decision: 'allow', decidedBy: `edit-of:${id}` });
  });

  it('a request nobody answers is denied when its timeout passes, and the ledger says so', async () => {
    const gate = gateFor({ posture: 'strict', approvalTimeoutMs: 150 }, fastBroker());
    const started = Date.now();
    const answer = await gate.decide(write('out.txt'));
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(answer).toMatchObject({ decision: 'deny', decidedBy: 'timeout' });
    expect(answer.message).toMatch(/Nobody approved this within 150 ms/);
    expect(await ledger.getApproval('wf', answer.approvalId!)).toMatchObject({ status: 'denied', decidedBy: 'timeout' });
  });

  it('a retried attempt finds the request again: a decision made meanwhile applies, and the deadline is not reset', async () => {
    const request = bash('make deploy');
    const id = approvalIdFor(1, request);
    const controller = new AbortController();
    const first = gateFor({ posture: 'strict', approvalTimeoutMs: 60_000 }, fastBroker()).decide(request, controller.signal);
    while ((await ledger.getApproval('wf', id))?.status !== 'pending') await new Promise((r) => setTimeout(r, 10));
    const expiresAt = (await ledger.getApproval('wf', id))!.expiresAt;
    controller.abort(new Error('worker died'));
    await expect(first).rejects.toThrow('worker died');
    // Nobody waits now; the operator decides anyway.
    await decidePendingApproval(ledger, 'wf', id, { allow: false, by: 'operator:bob', message: 'not today' });
    const retried = await gateFor({ posture: 'strict', approvalTimeoutMs: 60_000 }, refuse).decide(bash('make deploy'));
    expect(retried).toMatchObject({ decision: 'deny', decidedBy: 'operator:bob', message: 'not today', approvalId: id });
    expect((await ledger.getApproval('wf', id))!.expiresAt).toBe(expiresAt);
  });

  it('a session grant allows the same tool later in the run; deny and ask rules still win over it', async () => {
    const request = bash('npm test');
    const id = approvalIdFor(1, request);
    await Promise.all([gateFor('strict', fastBroker()).decide(request), operator(id, { allow: true, by: 'operator:alice', scope: 'session' })]);
    const policy = { posture: 'strict', deny: ['command:rm *'], ask: ['command:git push*'] };
    const later = gateFor(policy, refuse, 2);
    expect(await later.decide(bash('npm run build'))).toMatchObject({ decision: 'allow', decidedBy: `session-grant:${id}` });
    expect(await later.decide(bash('rm -rf /'))).toMatchObject({ decision: 'deny' });
    await expect(gateFor(policy, refuse, 2).decide(bash('git push'))).resolves.toMatchObject({ decision: 'deny', decidedBy: 'error' });
  });

  it('fails closed: a broken broker denies', async () => {
    const answer = await gateFor('strict', refuse).decide(bash('ls /root'));
    expect(answer).toMatchObject({ decision: 'deny', decidedBy: 'error' });
    expect(answer.message).toMatch(/the broker must not be asked/);
  });

  it('the same request twice in one attempt gets two ids (each is its own decision)', async () => {
    const gate = gateFor({ posture: 'strict', allow: ['command:ls'] }, refuse);
    const a = await gate.decide(bash('ls'));
    const b = await gate.decide(bash('ls'));
    expect(a.approvalId).toBe(approvalIdFor(1, bash('ls')));
    expect(b.approvalId).toBe(`${a.approvalId}-2`);
  });

  it('auto without rules is not interactive (adapters keep their one-way mode)', () => {
    expect(gateFor('auto', refuse).interactive).toBe(false);
    expect(gateFor({ posture: 'auto', ask: ['command:git push*'] }, refuse).interactive).toBe(true);
  });
});

describe('decidePendingApproval', () => {
  it('refuses unknown, already decided and edit-with-deny decisions with a code', async () => {
    await expect(decidePendingApproval(ledger, 'wf', 'nope', { allow: true, by: 'x' })).rejects.toMatchObject({ code: 'ApprovalUnknown' });
    await ledger.requestApproval({ workflowId: 'wf', requestId: 'r', turn: 1, tool: 't', kind: 'other', title: 't', input: {} });
    await expect(decidePendingApproval(ledger, 'wf', 'r', { allow: false, by: 'x', edit: {} })).rejects.toMatchObject({ code: 'ApprovalEditInvalid' });
    await decidePendingApproval(ledger, 'wf', 'r', { allow: false, by: 'operator:a' });
    const again = decidePendingApproval(ledger, 'wf', 'r', { allow: true, by: 'operator:b' });
    await expect(again).rejects.toBeInstanceOf(ApprovalDecisionError);
    await expect(again).rejects.toMatchObject({ code: 'ApprovalAlreadyDecided' });
    expect(await ledger.getApproval('wf', 'r')).toMatchObject({ status: 'denied', decidedBy: 'operator:a', message: 'Denied by operator:a.' });
  });
});
