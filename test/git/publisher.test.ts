/**
 * The pull-request publisher (src/git/publisher.ts) against the fake GitHub REST API (test/support/fake-github.ts):
 * one lookup then one create, GitHub's headers, a retried `open` that finds the pull request it made (also when the
 * first answer was lost), a 422 "already exists" resolved by looking again, bounded answers and time, and the token
 * in no message.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { GitHubPublisher, PublishError, type PullRequestRequest } from '../../src/git/publisher.js';
import { startFakeGitHub, type FakeGitHub } from '../support/fake-github.js';

const token = 'ghs_fakeToken0123456789abcdef';
let github: FakeGitHub;
let branchNo = 0;

beforeAll(async () => {
  github = await startFakeGitHub({ token });
});
afterAll(() => github.close());
beforeEach(() => {
  github.requests.length = 0;
});

/** A request for a branch no other test uses. */
function request(): PullRequestRequest {
  branchNo += 1;
  return { repository: 'acme/widgets', head: `dh/run-${branchNo}`, base: 'main', title: `Run ${branchNo}`, body: 'What the run did.' };
}
const publisher = (options: { token?: string; timeoutMs?: number; maxResponseBytes?: number } = {}) => new GitHubPublisher({ apiUrl: github.url, token, ...options });
const pullsOf = (head: string) => github.pulls.filter((p) => p.head === head);
const failureOf = async (promise: Promise<unknown>) => {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PublishError);
  return error as PublishError;
};

describe('GitHubPublisher.open', () => {
  it('opens the branch\'s pull request: one GET that finds none, then one POST, with GitHub\'s headers', async () => {
    const r = request();
    const opened = await publisher().open(r);
    const pull = pullsOf(r.head);
    expect(pull).toHaveLength(1);
    expect(opened).toEqual({ url: pull[0]!.html_url, number: pull[0]!.number, created: true });
    expect(pull[0]).toMatchObject({ repository: 'acme/widgets', base: 'main', title: r.title, body: r.body, state: 'open' });

    expect(github.requests.map((q) => q.method)).toEqual(['GET', 'POST']);
    const [get, post] = github.requests;
    const query = new URL(get!.path, 'http://x').searchParams;
    expect(new URL(get!.path, 'http://x').pathname).toBe('/repos/acme/widgets/pulls');
    expect(query.get('head')).toBe(`acme:${r.head}`);
    expect(post!.path).toBe('/repos/acme/widgets/pulls');
    expect(post!.body).toEqual({ title: r.title, head: r.head, base: 'main', body: r.body });
    for (const q of github.requests) {
      // The fake strips `authorization` from the record and answers 401 without the right bearer: the GET and POST had it.
      expect(q.headers.accept).toBe('application/vnd.github+json');
      expect(q.headers['x-github-api-version']).toMatch(/^\d{4}-\d{2}-\d{2}$/);
      expect(q.headers['user-agent']).toBeTruthy();
    }
    expect(post!.headers['content-type']).toMatch(/^application\/json/);
  });

  it('a second open for the same branch finds it: created false, no second POST', async () => {
    const r = request();
    const first = await publisher().open(r);
    github.requests.length = 0;
    const again = await publisher().open(r);
    expect(again).toEqual({ ...first, created: false });
    expect(github.requests.map((q) => q.method)).toEqual(['GET']);
    expect(pullsOf(r.head)).toHaveLength(1);
  });

  it('an answer lost after the pull request was made, then a retry: exactly one pull request', async () => {
    const r = request();
    // The GET answers what it would (no pull request yet); the POST opens it, and its answer is lost (502).
    github.interceptNext(1, { afterHandling: true, status: 200, body: '[]' });
    github.interceptNext(1, { afterHandling: true, status: 502 });
    const lost = await failureOf(publisher().open(r));
    expect(lost.status).toBe(502);
    expect(pullsOf(r.head)).toHaveLength(1); // made, though the caller never heard
    // The activity's retry: the lookup finds it, nothing is posted.
    github.requests.length = 0;
    const retried = await publisher().open(r);
    expect(retried).toEqual({ url: pullsOf(r.head)[0]!.html_url, number: pullsOf(r.head)[0]!.number, created: false });
    expect(github.requests.map((q) => q.method)).toEqual(['GET']);
    expect(pullsOf(r.head)).toHaveLength(1);
  });

  it('a 422 "already exists" on the POST is resolved by looking up again', async () => {
    const r = request();
    // The GET finds nothing (an empty list, as if the other attempt's pull request were not listed yet); then the
    // POST meets the pull request another attempt opened meanwhile.
    github.interceptNext(1, { status: 200, body: '[]' });
    const other = github.addPull({ repository: r.repository, head: r.head, base: r.base, title: 'opened by another attempt' });
    const found = await publisher().open(r);
    expect(found).toEqual({ url: other.html_url, number: other.number, created: false });
    expect(github.requests.map((q) => q.method)).toEqual(['GET', 'POST', 'GET']);
    expect(pullsOf(r.head)).toHaveLength(1);
  });

  it('a 422 that is not "already exists" is passed up with GitHub\'s words and its status, with no second lookup', async () => {
    github.interceptNext(1, { status: 200, body: '[]' });
    github.failNext(1, 422, 'Validation Failed');
    const error = await failureOf(publisher().open(request()));
    expect(error.status).toBe(422);
    expect(error.message).toMatch(/GitHub POST \/repos\/acme\/widgets\/pulls: HTTP 422 Validation Failed/);
    expect(github.requests.map((q) => q.method)).toEqual(['GET', 'POST']);
  });

  it('refuses a repository that is not owner/name and a token that is not one line, before any request', async () => {
    await expect(publisher().open({ ...request(), repository: 'not a repository' })).rejects.toThrow(/owner\/name/);
    await expect(publisher().open({ ...request(), repository: '../x' })).rejects.toThrow(PublishError);
    expect(() => new GitHubPublisher({ apiUrl: github.url, token: 'a\nb' })).toThrow(PublishError);
    expect(() => new GitHubPublisher({ apiUrl: github.url, token: '' })).toThrow(PublishError);
    expect(github.requests).toHaveLength(0);
  });

  it('a 401 names the status and GitHub\'s message, never the token', async () => {
    const wrong = 'ghp_wrongTokenWrongToken0000';
    const error = await failureOf(publisher({ token: wrong }).open(request()));
    expect(error.status).toBe(401);
    expect(error.message).toMatch(/HTTP 401/);
    expect(error.message).toMatch(/Bad credentials/);
    expect(error.message).not.toContain(wrong);
    // An answer that quotes the token back is cut too.
    github.failNext(1, 403, `token ${token} may not open pull requests`);
    const quoted = await failureOf(publisher().open(request()));
    expect(quoted.status).toBe(403);
    expect(quoted.message).toMatch(/HTTP 403 token \[redacted\] may not/);
    expect(quoted.message).not.toContain(token);
  });

  it('refuses an answer over the byte limit (1 MiB by default), reading no more of it', async () => {
    const huge = JSON.stringify([{ number: 1, html_url: `https://github.test/${'x'.repeat(2 * 1024 * 1024)}` }]);
    github.interceptNext(1, { status: 200, body: huge });
    const r = request();
    const error = await failureOf(publisher().open(r));
    expect(error.message).toMatch(/over 1048576 bytes/);
    expect(error.status).toBe(200);
    expect(pullsOf(r.head)).toHaveLength(0); // it stopped there: no POST
    // A smaller limit, and an answer just under the default, which is read.
    github.interceptNext(1, { status: 200, body: JSON.stringify([{ pad: 'y'.repeat(2000) }]) });
    await expect(publisher({ maxResponseBytes: 1000 }).open(request())).rejects.toThrow(/over 1000 bytes/);
    github.interceptNext(1, { status: 200, body: JSON.stringify([{ pad: 'z'.repeat(1024 * 1024 - 100) }]) });
    await expect(publisher().open(request())).resolves.toMatchObject({ created: true });
  });

  it('an answer slower than timeoutMs fails with a timeout PublishError (no status)', async () => {
    github.interceptNext(1, { delayMs: 2_000, afterHandling: true, status: 200, body: '[]' });
    const started = Date.now();
    const error = await failureOf(publisher({ timeoutMs: 200 }).open(request()));
    expect(Date.now() - started).toBeLessThan(1_500);
    expect(error.status).toBeUndefined();
    expect(error.message).toMatch(/no answer within 200 ms/);
  });

  it('a caller\'s abort ends the request as cancelled', async () => {
    github.interceptNext(1, { delayMs: 2_000, afterHandling: true, status: 200, body: '[]' });
    const error = await failureOf(publisher().open(request(), { signal: AbortSignal.timeout(100) }));
    expect(error.message).toMatch(/cancelled/);
  });

  it('a closed pull request for the branch is not the run\'s: a new one is opened', async () => {
    const r = request();
    const closed = github.addPull({ repository: r.repository, head: r.head, base: r.base, title: 'an earlier run, merged', state: 'closed' });
    const opened = await publisher().open(r);
    expect(opened.created).toBe(true);
    expect(opened.number).not.toBe(closed.number);
    expect(pullsOf(r.head).map((p) => p.state)).toEqual(['closed', 'open']);
  });
});
