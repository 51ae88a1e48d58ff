/**
 * A fake GitHub REST API on 127.0.0.1 — pull requests only (list and create), the way test/e2e's fake vendor stands
 * in for the model API: it checks the bearer token (401 "Bad credentials" otherwise), records every request, keeps
 * the pull requests it opened, and can be told what to answer to the next requests (a failure status, a huge or slow
 * answer, or a failure after it did the work — a lost answer).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedGitHubRequest {
  readonly method: string;
  /** Path and query, e.g. `/repos/o/r/pulls?head=o%3Ab&state=all`. */
  readonly path: string;
  /** The request's headers without `authorization`. */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: unknown;
}

export interface FakePull {
  readonly number: number;
  readonly repository: string;
  readonly head: string;
  readonly base: string;
  readonly title: string;
  readonly body: string;
  state: 'open' | 'closed';
  readonly html_url: string;
}

/** What to answer to one request instead of (or after) handling it. */
export interface Interception {
  readonly status?: number;
  /** The answer's body (default `{"message":"fake github: intercepted"}`). */
  readonly body?: string;
  /** Wait this long before answering (with `afterHandling`, the work is done at once and only the answer waits). */
  readonly delayMs?: number;
  /** Do the work (e.g. open the pull request), then answer with `status`/`body` instead: an answer lost on the way. */
  readonly afterHandling?: boolean;
}

export interface FakeGitHub {
  /** Base URL, e.g. `http://127.0.0.1:12345` (a publisher's `apiUrl`). */
  readonly url: string;
  /** Every request received, in order. */
  readonly requests: RecordedGitHubRequest[];
  /** Every pull request opened (by the API or `addPull`). */
  readonly pulls: FakePull[];
  /** The next `count` requests get `interception` (queued behind earlier ones). */
  interceptNext(count: number, interception: Interception): void;
  /** The next `count` requests fail with `status` and GitHub's error shape, untouched. */
  failNext(count: number, status: number, message?: string): void;
  /** A pull request that exists already (opened by hand). */
  addPull(pull: { repository: string; head: string; base: string; title?: string; state?: 'open' | 'closed' }): FakePull;
  close(): Promise<void>;
}

export async function startFakeGitHub(options: { token: string }): Promise<FakeGitHub> {
  const requests: RecordedGitHubRequest[] = [];
  const pulls: FakePull[] = [];
  const intercepts: Interception[] = [];
  let url = '';

  const addPull: FakeGitHub['addPull'] = (p) => {
    const number = pulls.length + 1;
    const pull: FakePull = { number, repository: p.repository, head: p.head, base: p.base, title: p.title ?? '', body: '', state: p.state ?? 'open', html_url: `https://github.test/${p.repository}/pull/${number}` };
    pulls.push(pull);
    return pull;
  };
  const wire = (p: FakePull) => ({ number: p.number, html_url: p.html_url, state: p.state, title: p.title, body: p.body, head: { ref: p.head, label: `${p.repository.split('/')[0]}:${p.head}` }, base: { ref: p.base } });

  /** The real answer to a request: [status, body]. */
  const handle = (method: string, path: string, body: unknown): [number, unknown] => {
    const parsed = new URL(path, 'http://fake');
    const m = /^\/repos\/([^/]+)\/([^/]+)\/pulls$/.exec(parsed.pathname);
    if (!m) return [404, { message: 'Not Found' }];
    const repository = `${decodeURIComponent(m[1]!)}/${decodeURIComponent(m[2]!)}`;
    const owner = repository.split('/')[0]!;
    if (method === 'GET') {
      const head = parsed.searchParams.get('head');
      const state = parsed.searchParams.get('state') ?? 'open';
      const listed = pulls.filter((p) => p.repository === repository && (head === null || `${owner}:${p.head}` === head) && (state === 'all' || p.state === state));
      return [200, listed.map(wire)];
    }
    if (method === 'POST') {
      const b = body as { title?: unknown; head?: unknown; base?: unknown; body?: unknown } | undefined;
      if (!b || typeof b.title !== 'string' || typeof b.head !== 'string' || typeof b.base !== 'string') return [422, { message: 'Validation Failed', errors: [{ resource: 'PullRequest', code: 'missing_field' }] }];
      if (pulls.some((p) => p.repository === repository && p.head === b.head && p.state === 'open')) {
        return [422, { message: 'Validation Failed', errors: [{ resource: 'PullRequest', code: 'custom', message: `A pull request already exists for ${owner}:${b.head}.` }] }];
      }
      const pull = addPull({ repository, head: b.head, base: b.base, title: b.title });
      (pull as { body: string }).body = typeof b.body === 'string' ? b.body : '';
      return [201, wire(pull)];
    }
    return [404, { message: 'Not Found' }];
  };

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = raw ? JSON.parse(raw) : undefined;
      } catch {
        body = raw;
      }
      const { authorization, ...headers } = req.headers;
      const method = req.method ?? 'GET';
      const path = req.url ?? '/';
      requests.push({ method, path, headers, body });
      const send = (status: number, payload: string) => {
        if (res.destroyed) return;
        res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' }).end(payload);
      };
      const intercept = intercepts.shift();
      const authorized = authorization === `Bearer ${options.token}`;
      // A lost answer: the work is done as the request arrives, however late (or never) its answer leaves.
      if (authorized && intercept?.afterHandling) handle(method, path, body);
      const answer = () => {
        if (!authorized) return send(401, JSON.stringify({ message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' }));
        if (intercept?.afterHandling) return send(intercept.status ?? 502, intercept.body ?? JSON.stringify({ message: 'fake github: answer lost' }));
        if (intercept) return send(intercept.status ?? 500, intercept.body ?? JSON.stringify({ message: 'fake github: intercepted' }));
        const [status, result] = handle(method, path, body);
        send(status, JSON.stringify(result));
      };
      if (intercept?.delayMs) setTimeout(answer, intercept.delayMs);
      else answer();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    requests,
    pulls,
    interceptNext: (count, interception) => {
      for (let i = 0; i < count; i += 1) intercepts.push(interception);
    },
    failNext: (count, status, message = 'fake github: failing as told') => {
      for (let i = 0; i < count; i += 1) intercepts.push({ status, body: JSON.stringify({ message }) });
    },
    addPull,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
