/**
 * The agent's permission policy (catalog `agents[].permissions`): a posture plus allow / deny / ask rules on
 * tool names, kinds, shell commands and paths. It decides first; what it leaves open goes to a human.
 *
 * Precedence: deny → an exact edit the operator approved → ask → a session grant → allow → built-in → the
 * posture's default (strict: ask, auto and dangerous: allow).
 */
import path from 'node:path';
import { z } from 'zod';
import type { PermissionPosture } from '../contracts/permissions.js';
import type { PermissionKind, PermissionRequest } from './types.js';

export const permissionKinds = ['command', 'edit', 'read', 'other'] as const satisfies readonly PermissionKind[];
export const postures = ['strict', 'auto', 'dangerous'] as const satisfies readonly PermissionPosture[];

/** One rule; every field present must match. */
export interface PermissionRule {
  /** Glob on the CLI's tool name, case-insensitive (`Bash`, `run_shell_command`, `*`). */
  readonly tool?: string;
  readonly kind?: PermissionKind;
  /** Glob on the shell command; `*` matches anything, spaces and slashes included. */
  readonly command?: string;
  /** Glob on the file path, workspace-relative (`src/**`, `.env*`) or absolute; `*` stops at `/`, `**` does not. */
  readonly path?: string;
}

/** The policy as the runtime uses it (the catalog's string form `permissions: strict` is the same with no rules). */
export interface PermissionPolicy {
  readonly posture: PermissionPosture;
  readonly allow: readonly PermissionRule[];
  readonly deny: readonly PermissionRule[];
  readonly ask: readonly PermissionRule[];
  /** A request nobody answers is denied this long after it was first asked. */
  readonly approvalTimeoutMs: number;
  /** Accept `strict` (or rules) on a harness without permission hooks, reported as advisory, instead of refusing. */
  readonly advisory: boolean;
  /**
   * Requests one turn attempt decides; the ones after are denied at once, without a ledger row or an operator
   * (absent in specs frozen before it: `defaultMaxRequestsPerTurn`).
   */
  readonly maxRequestsPerTurn?: number;
}

export const defaultApprovalTimeoutMs = 15 * 60_000;
/** Permission requests per turn when the catalog says nothing: far more than a real turn asks, far fewer than a flood. */
export const defaultMaxRequestsPerTurn = 500;

const ruleObject = z.strictObject({
  tool: z.string().min(1).optional(),
  kind: z.enum(permissionKinds).optional(),
  command: z.string().min(1).optional(),
  path: z.string().min(1).optional(),
});

/** `read`, `command:git status*`, `edit:src/**`, `path:.env*`, `tool:WebFetch`, or the object form. */
const ruleShorthand = z.string().transform((text, ctx): z.infer<typeof ruleObject> => {
  const colon = text.indexOf(':');
  const head = colon === -1 ? text : text.slice(0, colon);
  const rest = colon === -1 ? undefined : text.slice(colon + 1);
  if ((permissionKinds as readonly string[]).includes(head)) {
    const kind = head as PermissionKind;
    if (rest === undefined || rest === '') return { kind };
    return kind === 'command' ? { kind, command: rest } : { kind, path: rest };
  }
  if ((head === 'tool' || head === 'path') && rest) return { [head]: rest };
  ctx.addIssue({ code: 'custom', message: `"${text}" is not a rule: use read | edit | command | other, optionally ":pattern", or tool:NAME / path:GLOB, or an object {tool, kind, command, path}` });
  return z.NEVER;
});

/** Parses with the schema that fits the value's shape, so a mistake is reported by that schema (not "Invalid input"). */
function byShape<S extends z.ZodType, O extends z.ZodType>(forString: S, forObject: O) {
  return z.unknown().transform((value, ctx): z.output<S> | z.output<O> => {
    const parsed = (typeof value === 'string' ? forString : forObject).safeParse(value);
    if (parsed.success) return parsed.data as z.output<S> | z.output<O>;
    for (const issue of parsed.error.issues) {
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) ctx.addIssue({ code: 'custom', message: 'unknown field', path: [...(issue.path as PropertyKey[]), key] });
      } else ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path as PropertyKey[] });
    }
    return z.NEVER;
  });
}

export const permissionRuleSchema = byShape(ruleShorthand, ruleObject).refine((r) => Object.keys(r).length > 0, 'a rule must name at least one of tool, kind, command, path');

export const permissionPolicySchema = z
  .strictObject({
    posture: z.enum(postures).default('auto'),
    allow: z.array(permissionRuleSchema).default([]),
    deny: z.array(permissionRuleSchema).default([]),
    ask: z.array(permissionRuleSchema).default([]),
    approvalTimeoutMs: z.number().int().positive().default(defaultApprovalTimeoutMs),
    advisory: z.boolean().default(false),
    maxRequestsPerTurn: z.number().int().positive().default(defaultMaxRequestsPerTurn),
  })
  .superRefine((p, ctx) => {
    if (p.posture === 'dangerous' && p.allow.length + p.deny.length + p.ask.length > 0) {
      ctx.addIssue({ code: 'custom', path: ['posture'], message: 'dangerous runs every tool unasked, so its rules could never be enforced: use auto (allow unless a rule says otherwise) or strict' });
    }
  });

/** The catalog field: a posture name (today's form) or a policy block. */
export const agentPermissionsSchema = byShape(
  z.enum(postures, { error: () => `use one of ${postures.join(', ')}, or a policy block { posture, allow, deny, ask }` }).transform((posture): PermissionPolicy => policyFor(posture)),
  permissionPolicySchema,
);

/** The policy of a bare posture: no rules. */
export function policyFor(posture: PermissionPosture): PermissionPolicy {
  return { posture, allow: [], deny: [], ask: [], approvalTimeoutMs: defaultApprovalTimeoutMs, advisory: false, maxRequestsPerTurn: defaultMaxRequestsPerTurn };
}

/** Whether this policy can deny or ask anything, i.e. needs a harness that asks before tools run. */
export function policyIsInteractive(policy: PermissionPolicy): boolean {
  if (policy.posture === 'dangerous') return false;
  return policy.posture === 'strict' || policy.allow.length + policy.deny.length + policy.ask.length > 0;
}

/** The policy's verdict on a request, with the rule that decided. */
export interface PolicyVerdict {
  readonly outcome: 'allow' | 'deny' | 'ask';
  /** `policy:deny[2] command:rm *`, `builtin:read-in-workspace`, `posture:strict`, … */
  readonly by: string;
}

/** What the policy says about a request before grants and humans are consulted. */
export function evaluatePolicy(policy: PermissionPolicy, request: PermissionRequest, workspace: string): PolicyVerdict {
  const target = normalise(request, workspace);
  const deny = firstMatch(policy.deny, target, 'any');
  if (deny !== undefined) return { outcome: 'deny', by: describe('deny', deny, policy.deny[deny]!) };
  const ask = firstMatch(policy.ask, target, 'any');
  if (ask !== undefined) return { outcome: 'ask', by: describe('ask', ask, policy.ask[ask]!) };
  const allow = firstMatch(policy.allow, target, 'all');
  if (allow !== undefined) return { outcome: 'allow', by: describe('allow', allow, policy.allow[allow]!) };
  if (policy.posture === 'strict') {
    // Reading the workspace is what every turn does; asking a human for each read would make strict unusable.
    if (request.kind === 'read' && target.paths.every((p) => !p.outside)) return { outcome: 'allow', by: 'builtin:read-in-workspace' };
    return { outcome: 'ask', by: 'posture:strict' };
  }
  return { outcome: 'allow', by: `posture:${policy.posture}` };
}

/** Whether a deny or ask rule (checked before grants) matches; used so grants never override them. */
export function ruleBlocks(policy: PermissionPolicy, request: PermissionRequest, workspace: string): 'deny' | 'ask' | undefined {
  const target = normalise(request, workspace);
  if (firstMatch(policy.deny, target, 'any') !== undefined) return 'deny';
  if (firstMatch(policy.ask, target, 'any') !== undefined) return 'ask';
  return undefined;
}

interface Target {
  readonly tool: string;
  readonly kind: PermissionKind;
  readonly command?: string;
  /** Workspace-relative (POSIX) when inside, absolute when outside. */
  readonly paths: readonly { readonly text: string; readonly absolute: string; readonly outside: boolean }[];
}

function normalise(request: PermissionRequest, workspace: string): Target {
  const root = path.posix.resolve(workspace);
  const paths = (request.paths ?? []).map((p) => {
    const absolute = path.posix.resolve(root, p);
    const relative = path.posix.relative(root, absolute);
    const outside = relative === '..' || relative.startsWith('../') || path.posix.isAbsolute(relative);
    return { text: outside ? absolute : relative === '' ? '.' : relative, absolute, outside };
  });
  const command = request.command?.trim().replace(/\s+/g, ' ');
  return { tool: request.tool, kind: request.kind, ...(command !== undefined ? { command } : {}), paths };
}

function firstMatch(rules: readonly PermissionRule[], target: Target, mode: 'any' | 'all'): number | undefined {
  const index = rules.findIndex((rule) => matches(rule, target, mode));
  return index === -1 ? undefined : index;
}

/**
 * `mode: "all"` (allow rules): every path must match and a command must match as a whole, without shell control
 * operators the pattern does not contain (so `git status*` never allows `git status; rm -rf ~`).
 * `mode: "any"` (deny and ask rules): one matching path, or one segment of a compound command, is enough.
 */
function matches(rule: PermissionRule, target: Target, mode: 'any' | 'all'): boolean {
  if (rule.kind !== undefined && rule.kind !== target.kind) return false;
  if (rule.tool !== undefined && !globRegExp(rule.tool, 'text', 'i').test(target.tool)) return false;
  if (rule.command !== undefined) {
    if (target.command === undefined) return false;
    const pattern = globRegExp(rule.command, 'text');
    if (mode === 'all') {
      if (!pattern.test(target.command)) return false;
      if (controlOperators(target.command).some((op) => !rule.command!.includes(op))) return false;
    } else if (!pattern.test(target.command) && !commandSegments(target.command).some((s) => pattern.test(s))) {
      return false;
    }
  }
  if (rule.path !== undefined) {
    if (target.paths.length === 0) return false;
    const absolutePattern = rule.path.startsWith('/');
    const pattern = globRegExp(rule.path, 'path');
    const test = (p: Target['paths'][number]): boolean => pattern.test(absolutePattern ? p.absolute : p.text);
    if (mode === 'all' ? !target.paths.every(test) : !target.paths.some(test)) return false;
  }
  return true;
}

const operatorPattern = /;|&&|\|\||\||&|`|\$\(|>|<|\n/g;

function controlOperators(command: string): string[] {
  return [...new Set(command.match(operatorPattern) ?? [])];
}

function commandSegments(command: string): string[] {
  return command
    .split(/;|&&|\|\||\||&|`|\$\(|\)|\n/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** A glob as a whole-string RegExp; in `path` mode `*` and `?` stop at `/`, in `text` mode they do not. */
export function globRegExp(glob: string, mode: 'path' | 'text', flags = ''): RegExp {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        i++;
        if (glob[i + 1] === '/') {
          i++;
          out += '(?:.*/)?';
        } else out += '.*';
      } else out += mode === 'path' ? '[^/]*' : '.*';
    } else if (c === '?') out += mode === 'path' ? '[^/]' : '.';
    else out += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${out}$`, flags);
}

function describe(list: 'allow' | 'deny' | 'ask', index: number, rule: PermissionRule): string {
  // `kind:command` is implied by a command pattern.
  const parts = (['tool', 'kind', 'command', 'path'] as const)
    .filter((k) => rule[k] !== undefined && !(k === 'kind' && rule.command !== undefined))
    .map((k) => `${k}:${rule[k]}`);
  return `policy:${list}[${index}] ${parts.join(' ')}`;
}
