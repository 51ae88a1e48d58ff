/**
 * A git remote over smart HTTP on 127.0.0.1: `git http-backend` as a CGI behind node:http, serving the bare
 * repositories under `projectRoot` (`<base>/<name>.git`). With a `token` it answers 401 (Basic) to any request
 * without it; `state` makes it fail the way a real host does — the next requests answered 503 (a host that is
 * down), or a push done and its answer lost.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface GitHttp {
  /** e.g. `http://127.0.0.1:12345`; a repository is `${base}/remote.git`. */
  readonly base: string;
  readonly seen: { method: string; url: string; authorized: boolean }[];
  readonly state: {
    /** The next push is done, then answered 502. */
    loseNextPushAnswer: boolean;
    /** The next this many requests are answered 503 without touching a repository. */
    failNext: number;
  };
  close(): Promise<void>;
}

export async function startGitHttp(projectRoot: string, token?: string): Promise<GitHttp> {
  const expected = token === undefined ? undefined : `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}`;
  const seen: GitHttp['seen'] = [];
  const state = { loseNextPushAnswer: false, failNext: 0 };
  const server = http.createServer((req, res) => {
    const authorized = expected === undefined || req.headers.authorization === expected;
    seen.push({ method: req.method ?? '', url: req.url ?? '', authorized });
    if (state.failNext > 0) {
      state.failNext--;
      req.resume();
      res.writeHead(503, { 'Content-Type': 'text/plain' }).end('down for maintenance\n');
      return;
    }
    if (!authorized) {
      req.resume();
      res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="test"', 'Content-Type': 'text/plain' }).end('unauthorized\n');
      return;
    }
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const header = (name: string) => {
      const v = req.headers[name];
      return Array.isArray(v) ? v.join(', ') : (v ?? '');
    };
    const child = spawn('git', ['http-backend'], {
      env: {
        PATH: process.env.PATH,
        HOME: projectRoot,
        GIT_CONFIG_NOSYSTEM: '1',
        GIT_PROJECT_ROOT: projectRoot,
        GIT_HTTP_EXPORT_ALL: '1',
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        REQUEST_METHOD: req.method ?? 'GET',
        CONTENT_TYPE: header('content-type'),
        REMOTE_USER: 'x-access-token',
        REMOTE_ADDR: '127.0.0.1',
        HTTP_CONTENT_ENCODING: header('content-encoding'),
        HTTP_GIT_PROTOCOL: header('git-protocol'),
      },
    });
    const lose = state.loseNextPushAnswer && url.pathname.endsWith('/git-receive-pack');
    if (lose) state.loseNextPushAnswer = false;
    req.pipe(child.stdin);
    const out: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.on('close', () => {
      // The remote did the work; the answer is lost on the way back.
      if (lose) return void res.writeHead(502).end('bad gateway\n');
      const all = Buffer.concat(out);
      const split = all.indexOf('\r\n\r\n') >= 0 ? all.indexOf('\r\n\r\n') : all.indexOf('\n\n');
      const gap = all.indexOf('\r\n\r\n') >= 0 ? 4 : 2;
      const headers: Record<string, string> = {};
      let status = 200;
      for (const line of all.subarray(0, Math.max(0, split)).toString('latin1').split(/\r?\n/)) {
        const colon = line.indexOf(':');
        if (colon <= 0) continue;
        const name = line.slice(0, colon).trim();
        const value = line.slice(colon + 1).trim();
        if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10);
        else headers[name] = value;
      }
      res.writeHead(status, headers).end(split >= 0 ? all.subarray(split + gap) : all);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    seen,
    state,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

