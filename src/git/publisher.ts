/**
 * Opens the pull request of a run's branch (issue 24, `deliver: pull-request`) through a small publisher interface;
 * `GitHubPublisher` speaks GitHub's REST API. Idempotent: the branch's pull request is looked up first, so a retried
 * delivery finds the one it opened (`created: false`) and never opens a second. No retries inside: the activity's
 * retry policy owns them. Bounded: a timeout per request and at most 1 MiB read of any answer. The token is sent as
 * a bearer header only and is cut out of every message.
 */

/** The pull request a run's delivery asks for. */
export interface PullRequestRequest {
  /** `owner/name`. */
  readonly repository: string;
  /** The run's branch (in the same repository). */
  readonly head: string;
  /** The branch it is proposed into. */
  readonly base: string;
  readonly title: string;
  readonly body: string;
}

/** The branch's pull request; `created` is false when it existed already (a retried delivery, or opened by hand). */
export interface PullRequest {
  readonly url: string;
  readonly number: number;
  readonly created: boolean;
}

/** Opens (or finds) the pull request of a branch. */
export interface PullRequestPublisher {
  open(request: PullRequestRequest, options?: { readonly signal?: AbortSignal }): Promise<PullRequest>;
}

/** A publisher request that failed; `status` is the HTTP status (undefined: no answer — timeout, network). */
export class PublishError extends Error {
  override readonly name = 'PublishError';
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

export interface GitHubPublisherOptions {
  /** Default `https://api.github.com` (GitHub Enterprise: `https://<host>/api/v3`). */
  readonly apiUrl?: string;
  readonly token: string;
  /** Default: the global `fetch`. */
  readonly fetch?: typeof fetch;
  /** Per request, including reading its answer (default 30 s). */
  readonly timeoutMs?: number;
  /** What is read of any answer at most (default 1 MiB). */
  readonly maxResponseBytes?: number;
}

const MiB = 1024 * 1024;

interface GitHubPull {
  readonly number: number;
  readonly html_url: string;
  readonly head?: { readonly ref?: string };
}

/** GitHub's REST API (`GET` then `POST /repos/{owner}/{name}/pulls`). */
export class GitHubPublisher implements PullRequestPublisher {
  readonly #apiUrl: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #timeoutMs: number;
  readonly #maxBytes: number;

  constructor(options: GitHubPublisherOptions) {
    if (!options.token || /[\r\n]/.test(options.token)) throw new PublishError('GitHubPublisher needs a token (one line)');
    this.#apiUrl = (options.apiUrl ?? 'https://api.github.com').replace(/\/+$/, '');
    this.#token = options.token;
    this.#fetch = options.fetch ?? fetch;
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#maxBytes = options.maxResponseBytes ?? MiB;
  }

  async open(request: PullRequestRequest, options: { readonly signal?: AbortSignal } = {}): Promise<PullRequest> {
    const [owner, name] = splitRepository(request.repository);
    const pulls = `/repos/${encodeURIComponent(owner)}/${encodeURIComponent(name)}/pulls`;
    const find = async (): Promise<PullRequest | undefined> => {
      // Open ones only: a closed (or merged) pull request on this branch name is an earlier run's, not this one's.
      const query = `?head=${encodeURIComponent(`${owner}:${request.head}`)}&state=open&per_page=100`;
      const listed = await this.#call('GET', pulls + query, undefined, options.signal);
      if (!Array.isArray(listed)) throw new PublishError(`GitHub GET ${pulls}: the answer is not a list of pull requests`);
      const pull = (listed as GitHubPull[]).find((p) => p && typeof p.number === 'number' && (p.head?.ref === undefined || p.head.ref === request.head));
      return pull ? { url: pull.html_url, number: pull.number, created: false } : undefined;
    };
    const existing = await find();
    if (existing) return existing;
    try {
      const pull = (await this.#call('POST', pulls, { title: request.title, head: request.head, base: request.base, body: request.body }, options.signal)) as GitHubPull;
      if (typeof pull?.number !== 'number' || typeof pull.html_url !== 'string') throw new PublishError(`GitHub POST ${pulls}: the answer names no pull request`);
      return { url: pull.html_url, number: pull.number, created: true };
    } catch (error) {
      // Opened meanwhile (another attempt, or by hand): GitHub says so with a 422; the lookup finds it.
      if (error instanceof PublishError && error.status === 422 && /already exists/i.test(error.message)) {
        const found = await find();
        if (found) return found;
      }
      throw error;
    }
  }

  async #call(method: 'GET' | 'POST', path: string, body: unknown, signal: AbortSignal | undefined): Promise<unknown> {
    const what = `GitHub ${method} ${path.split('?')[0]}`;
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    const abort = signal ? AbortSignal.any([signal, timeout]) : timeout;
    let text: string;
    let status: number;
    try {
      const response = await this.#fetch(this.#apiUrl + path, {
        method,
        headers: {
          Authorization: `Bearer ${this.#token}`,
          Accept: 'application/vnd.github+json',
          'X-GitHub-Api-Version': '2022-11-28',
          'User-Agent': 'durable-harness',
          ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        redirect: 'error',
        signal: abort,
      });
      status = response.status;
      text = await readBounded(response, this.#maxBytes, what);
    } catch (error) {
      if (error instanceof PublishError) throw error;
      const reason = timeout.aborted ? `no answer within ${this.#timeoutMs} ms` : signal?.aborted ? 'cancelled' : error instanceof Error ? error.message : String(error);
      throw new PublishError(this.#redact(`${what}: ${reason}`));
    }
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (status < 200 || status > 299) {
      const message = gitHubMessage(parsed);
      throw new PublishError(this.#redact(`${what}: HTTP ${status}${message ? ` ${message}` : ''}`), status);
    }
    if (parsed === undefined) throw new PublishError(`${what}: HTTP ${status} with an answer that is not JSON`, status);
    return parsed;
  }

  #redact(text: string): string {
    return text.split(this.#token).join('[redacted]');
  }
}

/** GitHub's `message`, with the `errors[].message` of a validation failure (where "already exists" is said). */
function gitHubMessage(body: unknown): string | undefined {
  if (!body || typeof body !== 'object') return undefined;
  const { message, errors } = body as { message?: unknown; errors?: unknown };
  const details = Array.isArray(errors)
    ? errors.map((e) => (e && typeof e === 'object' && typeof (e as { message?: unknown }).message === 'string' ? (e as { message: string }).message : undefined)).filter((m): m is string => !!m)
    : [];
  const all = [typeof message === 'string' ? message : undefined, ...details].filter((m): m is string => !!m);
  return all.length > 0 ? all.join(': ').slice(0, 500) : undefined;
}

/** The answer's text, read up to `limit` bytes; more is refused (the rest is never read). */
async function readBounded(response: Response, limit: number, what: string): Promise<string> {
  if (!response.body) return '';
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.byteLength;
    if (bytes > limit) {
      await reader.cancel().catch(() => undefined);
      throw new PublishError(`${what}: HTTP ${response.status} with an answer over ${limit} bytes (cut there)`, response.status);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function splitRepository(repository: string): [string, string] {
  const m = /^([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)$/.exec(repository);
  if (!m || m[1] === '.' || m[1] === '..' || m[2] === '.' || m[2] === '..') throw new PublishError(`${JSON.stringify(repository.slice(0, 100))} is not a GitHub repository "owner/name"`);
  return [m[1]!, m[2]!];
}
