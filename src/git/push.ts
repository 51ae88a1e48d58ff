/**
 * Pushes a run's branch to its remote (issue 24, `deliver: push`), with the worker's own git directory and the fixed
 * configuration of ./repository.ts — once: a retried push that finds the branch already at the run's head pushes
 * nothing, and a branch that exists at another commit is refused, never forced.
 *
 * The token (https remotes) travels only as an `Authorization` header set through git's environment config
 * (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, as `http.<remote>.extraHeader`): never in argv (which
 * every process on the host can read), never in a config file, never in an error — git's words are passed up with
 * the token and its encodings cut out. Redirects are not followed, so the header reaches the remote's host only.
 * A local-path remote's own hooks (receive-pack's) are the remote owner's and run as they would for any push to it.
 */
import { GitError, git, type GitOptions, type GitRun } from './repository.js';

/** A push the worker will not make: the remote branch is at another commit, or the request cannot be honoured. */
export class PushRefused extends Error {
  override readonly name = 'PushRefused';
  constructor(
    message: string,
    /** The remote branch's commit, when it exists at another one. */
    readonly remoteHead?: string,
  ) {
    super(message);
  }
}

export interface PushRequest {
  /** The run's git directory (holds `head`). */
  readonly gitDir: string;
  /** A URL (https, http, ssh, git, file) or a local path. */
  readonly remote: string;
  /** The branch on the remote, e.g. `dh/<run id>` (pushed to `refs/heads/<branch>`). */
  readonly branch: string;
  /** The commit to push. */
  readonly head: string;
  /** For http(s) remotes: sent as `Authorization: Basic base64(<tokenUser>:<token>)`; unused for other remotes. */
  readonly token?: string;
  /** The user name that goes with the token (default `x-access-token`, as GitHub takes app and personal tokens). */
  readonly tokenUser?: string;
  /** Ends a push that hangs (an activity's cancellation). */
  readonly signal?: AbortSignal;
  /** Per git command (default 5 minutes). */
  readonly timeoutMs?: number;
}

export interface PushResult {
  /** False when the remote branch was already at `head` (a retried delivery): nothing was sent. */
  readonly pushed: boolean;
  readonly ref: string;
}

/** Pushes `head` to `refs/heads/<branch>` on `remote`, unless it is there already; refuses a diverged branch. */
export async function pushBranch(request: PushRequest): Promise<PushResult> {
  const { gitDir, remote, branch, head } = request;
  const ref = `refs/heads/${branch}`;
  const shown = displayRemote(remote);
  if (remote.startsWith('-') || /[\u0000-\u001f\u007f]/.test(remote)) throw new PushRefused(`remote ${JSON.stringify(shown.slice(0, 80))} is not a URL or a path`);
  if (branch.startsWith('-') || !/^[0-9a-f]{40}(?:[0-9a-f]{24})?$/.test(head)) throw new PushRefused(`push of ${JSON.stringify(branch)} at ${JSON.stringify(head.slice(0, 80))}: give a branch name and a full commit id`);
  const where: GitRun = { gitDir };
  await git(['check-ref-format', ref], where).catch(() => {
    throw new PushRefused(`${JSON.stringify(branch)} is not a branch name git accepts`);
  });
  await git(['cat-file', '-e', `${head}^{commit}`], where).catch(() => {
    throw new PushRefused(`commit ${head} is not in the run's git directory ${gitDir}`);
  });

  const auth = remoteAuth(request.remote, request.token, request.tokenUser);
  const options: GitOptions = { env: auth.env, timeoutMs: request.timeoutMs ?? 5 * 60_000, ...(request.signal ? { signal: request.signal } : {}) };
  const run = (args: string[]) => git(args, where, options).catch((error: unknown) => {
    throw new GitError(auth.redact(error instanceof Error ? error.message : String(error)));
  });

  const remoteHead = async () => {
    const listed = await run(['ls-remote', '--heads', '--', remote, ref]);
    const line = listed.split('\n').find((l) => l.endsWith(`\t${ref}`));
    return line?.split('\t')[0];
  };
  const settled = (found: string | undefined): PushResult | undefined => {
    if (found === head) return { pushed: false, ref };
    if (found !== undefined) throw new PushRefused(`${ref} on ${shown} is at ${found}, not the run's ${head}: the branch was pushed by someone else; it is not overwritten`, found);
    return undefined;
  };

  const before = settled(await remoteHead());
  if (before) return before;
  try {
    await run(['push', '--porcelain', '--no-verify', '--no-follow-tags', '--recurse-submodules=no', '--', remote, `${head}:${ref}`]);
  } catch (error) {
    // Another attempt may have pushed it meanwhile (or the answer was lost after the remote took it).
    const after = settled(await remoteHead().catch(() => undefined));
    if (after) return after;
    throw error;
  }
  return { pushed: true, ref };
}

/** The remote without any user name or password in it, for messages. */
function displayRemote(remote: string): string {
  return remote.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@]*@/i, '$1');
}

/**
 * The environment that lets the worker's git reach `remote` with `token` (fetch and push): the token as an
 * `Authorization` header scoped to the remote's URL, no redirects followed; and a function that cuts the token (and
 * its encodings) out of text. Refuses a password in the URL and a token over plain http to another host.
 */
export function remoteAuth(remote: string, secret: string | undefined, tokenUser?: string): { env: Record<string, string>; redact: (text: string) => string } {
  const request = { remote, token: secret, tokenUser };
  // Never follow a redirect: the header would go to wherever it points.
  const env: Record<string, string> = { GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: 'http.followRedirects', GIT_CONFIG_VALUE_0: 'false' };
  const url = /^https?:\/\//i.test(request.remote) ? safeUrl(request.remote) : undefined;
  if (url?.password) throw new PushRefused(`remote ${displayRemote(request.remote)} carries a password in its URL: remove it and give the token as a grant, so it is in no argv or message`);
  const token = request.token;
  if (!token || !url) return { env, redact: (text) => text }; // ssh, git, file and paths take no token
  if (/[\r\n\u0000]/.test(token) || /[\r\n\u0000:]/.test(request.tokenUser ?? '')) throw new PushRefused('the push token or its user holds a control character or a colon: it cannot go in a header');
  if (url.protocol === 'http:' && !['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) {
    throw new PushRefused(`remote ${displayRemote(request.remote)} is plain http: the token would cross the network in clear; use https`);
  }
  const basic = Buffer.from(`${request.tokenUser ?? 'x-access-token'}:${token}`).toString('base64');
  // Scoped to the remote's URL (any user name): a submodule or another host never gets it.
  url.username = '';
  url.search = '';
  url.hash = '';
  env.GIT_CONFIG_COUNT = '2';
  env.GIT_CONFIG_KEY_1 = `http.${url.href}.extraHeader`;
  env.GIT_CONFIG_VALUE_1 = `Authorization: Basic ${basic}`;
  const forms = [token, basic, encodeURIComponent(token), Buffer.from(token).toString('base64')].filter((f) => f.length > 0);
  return {
    env,
    redact: (text) => forms.reduce((t, form) => t.split(form).join('[redacted]'), text),
  };
}

function safeUrl(remote: string): URL | undefined {
  try {
    return new URL(remote);
  } catch {
    return undefined;
  }
}
