/**
 * A run on a git repository and what it delivers (docs/repositories.md): the words the start input, the catalog,
 * the workflow, the ledger and the client share. Pure.
 */
import type { RunOutcome } from './run.js';

/** How far the deliverable goes: a commit on the run's branch, that branch pushed, or a pull request opened for it. */
export const DELIVER_MODES = ['commit', 'push', 'pull-request'] as const;
export type DeliverMode = (typeof DELIVER_MODES)[number];

/** The repository part of a run's start input: each field overrides the agent's catalog default. */
export interface RepositoryRequest {
  /** A remote URL or a path on the worker's host; must be one the agent's `repository.sources` allows. */
  readonly source?: string;
  /** A branch, tag or commit (default: the catalog's, else `HEAD`). */
  readonly ref?: string;
  /** The run's new branch (default `<branchPrefix>/<workflow id>`). */
  readonly branch?: string;
}

/** The run's repository as the workflow keeps it (small: it travels in the run state). */
export interface RunRepository {
  readonly source: string;
  readonly ref: string;
  readonly branch: string;
  /** The commit the work tree was checked out at. */
  readonly base: string;
  /** The outcomes whose end delivers (default: success only). */
  readonly deliverOn: readonly RunOutcome[];
  readonly deliver: DeliverMode;
}

/**
 * What a run delivered, in its result, its ledger row and the status view. `delivered`: committed (and pushed, and
 * proposed, as the mode asks); `unchanged`: the run changed nothing; `refused`: the work tree holds something the
 * deliverable cannot carry (`problem` says what; nothing was pushed); `failed`: a step failed after its retries.
 */
export interface DeliverableView {
  readonly state: 'delivered' | 'unchanged' | 'refused' | 'failed';
  readonly mode: DeliverMode;
  readonly branch: string;
  readonly base: string;
  readonly head?: string;
  /** Files changed between base and head. */
  readonly files?: number;
  /** `git diff --stat` of base..head, its opening when long. */
  readonly diffStat?: string;
  /** The binary patch base..head in the ledger's blob store (`durable-harness diff RUN` prints it). */
  readonly patch?: { readonly blob: string; readonly bytes: number };
  /** The branch on the remote, when pushed. */
  readonly pushed?: { readonly remote: string; readonly branch: string };
  readonly pullRequest?: { readonly url: string; readonly number: number };
  readonly problem?: string;
}

/** A git ref or branch name as the worker accepts one (at most 200 characters): no option-like start, no `..`. */
export const GIT_REF_NAME = /^(?!-)(?!.*\.\.)(?!.*\/\/)(?!.*@\{)[A-Za-z0-9._/+-]{1,200}(?<!\.lock)(?<![./])$/;
export const GIT_REF_NAME_RULE = 'letters, digits, ".", "_", "/", "+", "-"; not starting with "-", no "..", not ending in "/", "." or ".lock"';

/** The opening of a diff stat kept in the result (bytes of history). */
export const DIFF_STAT_KEEP_CHARS = 4_000;

/** A one-line summary of a deliverable, for status lines and the Temporal UI's details. */
export function deliverableLine(d: DeliverableView): string {
  const what = d.state === 'delivered' ? `${d.files ?? 0} file(s) on ${d.branch} @ ${d.head?.slice(0, 12) ?? '?'}` : d.state === 'unchanged' ? `nothing changed (${d.branch} @ ${d.base.slice(0, 12)})` : `${d.state}: ${d.problem ?? ''}`;
  const where = d.pullRequest ? ` · ${d.pullRequest.url}` : d.pushed ? ` · pushed to ${d.pushed.remote}` : '';
  return `${what}${where}`;
}

/**
 * What is wrong with a repository source, or undefined: a remote URL (https, http, ssh, git, file), an scp-like
 * `user@host:path`, or an absolute path on the worker. A password or token in the URL is refused: the worker's
 * credential comes from its credential store (`repository.credential`), never from a string that lands in history.
 */
export function repositorySourceProblem(source: string): string | undefined {
  if (/[\u0000-\u001f\u007f]/.test(source)) return 'a repository source has no control characters';
  if (source.startsWith('-')) return `repository source ${JSON.stringify(source.slice(0, 80))} starts with "-": give a URL or an absolute path`;
  if (source.startsWith('/')) return undefined;
  const url = /^([a-z][a-z0-9+.-]*):\/\/([^/?#]*)/i.exec(source);
  if (url) {
    const scheme = url[1]!.toLowerCase();
    if (!['https', 'http', 'ssh', 'git', 'file'].includes(scheme)) return `repository source scheme "${scheme}" is not one the worker fetches: use https, http, ssh, git or file`;
    if (url[2]!.includes(':') && url[2]!.includes('@') && url[2]!.indexOf(':') < url[2]!.lastIndexOf('@')) {
      return 'the repository source carries a password or token in its URL: remove it and name the credential in repository.credential (the worker\'s credential store), so it never lands in history';
    }
    return undefined;
  }
  if (/^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/].*/.test(source) || /^[A-Za-z0-9.-]+:[^/]/.test(source)) {
    if (source.includes('::')) return `repository source ${JSON.stringify(source.slice(0, 80))} names a git remote helper: give a URL or an absolute path`;
    return undefined;
  }
  return `repository source ${JSON.stringify(source.slice(0, 80))} is neither a URL (https://, ssh://, git://, file://), an scp-like user@host:path nor an absolute path`;
}

/** Whether a start input's source is one the agent allows: its own `source`, or one of `sources` (exact, or a prefix ending in `/`). */
export function repositorySourceAllowed(source: string, allowed: { readonly source?: string; readonly sources: readonly string[] }): boolean {
  if (source === allowed.source) return true;
  return allowed.sources.some((s) => (s.endsWith('/') ? source.startsWith(s) && !source.slice(s.length).split('/').includes('..') : source === s));
}

/**
 * `owner/name` of a GitHub remote (`https://github.com/o/n(.git)`, `git@github.com:o/n(.git)`,
 * `ssh://git@github.com/o/n`), or undefined for another host or a path.
 */
export function githubRepositoryOf(source: string): string | undefined {
  const m = /^(?:https:\/\/(?:[^@/]*@)?(?:www\.)?github\.com\/|ssh:\/\/git@github\.com(?::22)?\/|git@github\.com:)([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+?)(?:\.git)?\/?$/i.exec(source);
  if (!m || ['.', '..'].includes(m[1]!) || ['.', '..'].includes(m[2]!)) return undefined;
  return `${m[1]}/${m[2]}`;
}
