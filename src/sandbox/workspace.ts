/** Workspace paths: which directory a scope maps to. Paths inside a workspace go through `SandboxFs`. */
import path from 'node:path';
import type { SandboxStartRequest, WorkspaceScope } from './types.js';

const maxSegmentLength = 200;
const allowedCharacters = 'letters, digits, and - _ . @ : + = , (and no "/", "\\", NUL, "." or "..")';

/**
 * Validates one id used as a directory name (workflow id, agent, tenant, user) and returns it.
 * Ids come from callers and catalogs; one with a separator or `..` would put a workspace anywhere on disk.
 */
export function safeSegment(id: string, what = 'id'): string {
  const problem = segmentProblem(id);
  if (problem) {
    throw new Error(`Invalid ${what} ${JSON.stringify(id)}: ${problem}. Allowed: ${allowedCharacters}, at most ${maxSegmentLength} characters.`);
  }
  return id;
}

function segmentProblem(id: string): string | undefined {
  if (id.length === 0) return 'it is empty';
  if (id.length > maxSegmentLength) return `it is ${id.length} characters long`;
  if (id === '.' || id === '..') return 'it is a relative directory name';
  if (id.includes('\0')) return 'it contains a NUL byte';
  if (id.includes('/') || id.includes('\\')) return 'it contains a path separator';
  if (path.isAbsolute(id) || path.win32.isAbsolute(id)) return 'it is an absolute path';
  // Control characters and other oddities make directory names unreadable in listings and logs.
  if (!/^[A-Za-z0-9._@:+=,-]+$/.test(id)) return 'it contains a character outside the allowed set';
  return undefined;
}

/**
 * The workspace directory (absolute) for a scope, below `root`. No scope's directory lies inside another's:
 * agent-user workspaces live under `agent-users/`, not inside the agent's own workspace, where that agent's
 * harness could plant links in place of another user's workspace.
 */
export function workspaceDirFor(root: string, scope: WorkspaceScope, request: Pick<SandboxStartRequest, 'workflowId' | 'agent' | 'identity'>): string {
  const base = path.resolve(root);
  switch (scope) {
    case 'run':
      return path.join(base, 'runs', safeSegment(request.workflowId, 'workflow id'));
    case 'agent':
      return path.join(base, 'agents', safeSegment(request.agent, 'agent name'));
    case 'agent-user':
      return path.join(
        base,
        'agent-users',
        safeSegment(request.agent, 'agent name'),
        safeSegment(request.identity.tenantId, 'tenant id'),
        safeSegment(request.identity.userId, 'user id'),
      );
    case 'parent':
      // The runtime hands a sub-agent its parent's sandbox; no provider creates a workspace for this scope.
      throw new Error('Workspace scope "parent" has no directory of its own: it is the parent run\'s workspace, handed over by the runtime.');
    default: {
      const never: never = scope;
      throw new Error(`Unknown workspace scope ${JSON.stringify(never)}; use run, agent or agent-user.`);
    }
  }
}
