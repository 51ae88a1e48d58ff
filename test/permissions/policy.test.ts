import { describe, expect, it } from 'vitest';
import { parseCatalog } from '../../src/catalog/load.js';
import { agentPermissionsSchema, evaluatePolicy, globRegExp, policyIsInteractive, type PermissionPolicy } from '../../src/permissions/policy.js';
import type { PermissionRequest } from '../../src/permissions/types.js';

const ws = '/work/ws';
const policy = (input: unknown): PermissionPolicy => agentPermissionsSchema.parse(input);
const options = { edit: 'native', denyMessage: true } as const;
const command = (cmd: string, tool = 'Bash'): PermissionRequest => ({ id: 'x', tool, kind: 'command', input: { command: cmd }, title: cmd, command: cmd, options });
const edit = (...paths: string[]): PermissionRequest => ({ id: 'x', tool: 'Write', kind: 'edit', input: { paths }, title: paths.join(', '), paths, options });
const read = (...paths: string[]): PermissionRequest => ({ id: 'x', tool: 'Read', kind: 'read', input: {}, title: 'read', paths, options });

describe('permission policy (catalog block)', () => {
  it('keeps the posture names: a bare posture is a policy without rules', () => {
    expect(policy('strict')).toEqual({ posture: 'strict', allow: [], deny: [], ask: [], approvalTimeoutMs: 900_000, advisory: false, maxRequestsPerTurn: 500 });
    expect(policy({ posture: 'strict', maxRequestsPerTurn: 20 }).maxRequestsPerTurn).toBe(20);
    expect(policyIsInteractive(policy('strict'))).toBe(true);
    expect(policyIsInteractive(policy('auto'))).toBe(false);
    expect(policyIsInteractive(policy('dangerous'))).toBe(false);
    expect(policyIsInteractive(policy({ posture: 'auto', deny: ['command:rm *'] }))).toBe(true);
  });

  it('reads shorthand and object rules', () => {
    const p = policy({ posture: 'strict', allow: ['read', 'command:git status*', 'edit:src/**', 'tool:WebFetch', { kind: 'edit', path: 'docs/*.md' }], deny: ['path:.env*'] });
    expect(p.allow).toEqual([{ kind: 'read' }, { kind: 'command', command: 'git status*' }, { kind: 'edit', path: 'src/**' }, { tool: 'WebFetch' }, { kind: 'edit', path: 'docs/*.md' }]);
    expect(p.deny).toEqual([{ path: '.env*' }]);
  });

  it('names the bad rule and the dangerous-with-rules mistake in the catalog error', () => {
    const catalog = (permissions: unknown) => ({
      harnesses: [{ name: 'h', driverClass: 'StdioJson', executable: 'node', vendor: 'v', model: 'm' }],
      agents: [{ name: 'a', harness: 'h', permissions }],
    });
    expect(() => parseCatalog(catalog({ posture: 'strict', allow: ['banana:*'] }), 'c.yaml')).toThrow(/agents\[0\]\.permissions.*"banana:\*" is not a rule/s);
    expect(() => parseCatalog(catalog({ posture: 'dangerous', deny: ['command:rm *'] }), 'c.yaml')).toThrow(/dangerous runs every tool unasked/);
    expect(() => parseCatalog(catalog('paranoid'), 'c.yaml')).toThrow(/agents\[0\]\.permissions/);
    expect(parseCatalog(catalog(undefined), 'c.yaml').agents[0]!.permissions.posture).toBe('auto');
  });
});

describe('evaluatePolicy', () => {
  it('strict: reads inside the workspace are allowed, everything else goes to a human', () => {
    const p = policy('strict');
    expect(evaluatePolicy(p, read(`${ws}/README.md`), ws)).toEqual({ outcome: 'allow', by: 'builtin:read-in-workspace' });
    expect(evaluatePolicy(p, read('/etc/passwd'), ws)).toEqual({ outcome: 'ask', by: 'posture:strict' });
    expect(evaluatePolicy(p, command('touch x'), ws)).toEqual({ outcome: 'ask', by: 'posture:strict' });
    expect(evaluatePolicy(p, edit('a.txt'), ws)).toEqual({ outcome: 'ask', by: 'posture:strict' });
  });

  it('deny beats ask beats allow; auto allows what no rule catches', () => {
    const p = policy({ posture: 'auto', allow: ['command:git *'], ask: ['command:git push*'], deny: ['command:git push --force*'] });
    expect(evaluatePolicy(p, command('git status'), ws).outcome).toBe('allow');
    expect(evaluatePolicy(p, command('git push origin main'), ws)).toEqual({ outcome: 'ask', by: 'policy:ask[0] command:git push*' });
    expect(evaluatePolicy(p, command('git push --force origin'), ws)).toEqual({ outcome: 'deny', by: 'policy:deny[0] command:git push --force*' });
    expect(evaluatePolicy(p, command('make'), ws)).toEqual({ outcome: 'allow', by: 'posture:auto' });
  });

  it('an allowed command pattern never allows a compound command the pattern does not spell out', () => {
    const p = policy({ posture: 'strict', allow: ['command:git status*'] });
    expect(evaluatePolicy(p, command('git status --short'), ws).outcome).toBe('allow');
    expect(evaluatePolicy(p, command('git status; rm -rf ~'), ws).outcome).toBe('ask');
    expect(evaluatePolicy(p, command('git status && curl x | sh'), ws).outcome).toBe('ask');
    expect(evaluatePolicy(p, command('git status $(rm -rf ~)'), ws).outcome).toBe('ask');
    expect(evaluatePolicy(p, command('git status > out.txt'), ws).outcome).toBe('ask');
  });

  it('a denied command is caught inside a compound command too', () => {
    const p = policy({ posture: 'auto', deny: ['command:rm *'] });
    expect(evaluatePolicy(p, command('ls && rm -rf build'), ws).outcome).toBe('deny');
    expect(evaluatePolicy(p, command('echo $(rm x)'), ws).outcome).toBe('deny');
    expect(evaluatePolicy(p, command('ls'), ws).outcome).toBe('allow');
  });

  it('path rules are workspace-relative; a path outside the workspace never matches a relative pattern', () => {
    const p = policy({ posture: 'strict', allow: ['edit:src/**'], deny: ['path:**/.env*', { path: '/etc/**' }] });
    expect(evaluatePolicy(p, edit(`${ws}/src/a/b.ts`), ws).outcome).toBe('allow');
    expect(evaluatePolicy(p, edit('src/x.ts'), ws).outcome).toBe('allow');
    expect(evaluatePolicy(p, edit('src/x.ts', 'README.md'), ws).outcome).toBe('ask'); // allow needs every path
    expect(evaluatePolicy(p, edit(`${ws}/../ws-other/src/x.ts`), ws).outcome).toBe('ask');
    expect(evaluatePolicy(p, edit(`${ws}/config/.env.local`), ws).outcome).toBe('deny');
    expect(evaluatePolicy(p, read('/etc/shadow'), ws).outcome).toBe('deny');
  });

  it('tool names match case-insensitively', () => {
    const p = policy({ posture: 'strict', allow: ['tool:run_shell_*'] });
    expect(evaluatePolicy(p, command('ls', 'Run_Shell_Command'), ws).outcome).toBe('allow');
  });
});

describe('globRegExp', () => {
  it('keeps * inside one path segment and lets ** cross them', () => {
    expect(globRegExp('src/*.ts', 'path').test('src/a.ts')).toBe(true);
    expect(globRegExp('src/*.ts', 'path').test('src/a/b.ts')).toBe(false);
    expect(globRegExp('src/**/*.ts', 'path').test('src/a.ts')).toBe(true);
    expect(globRegExp('src/**/*.ts', 'path').test('src/a/b/c.ts')).toBe(true);
    expect(globRegExp('git *', 'text').test('git log a/b')).toBe(true);
    expect(globRegExp('a.b', 'text').test('axb')).toBe(false);
  });
});
