/**
 * A run on a git repository, activity side (docs/repositories.md). `prepareRepository` (in `startSession`, and again
 * on a fresh workspace after a lost host) checks the source out into the sandbox's workspace from a per-host mirror,
 * on the run's new branch, with the run's git directory outside the workspace. `deliverWork` (at the run's end, on
 * the worker holding the workspace) commits the work tree there once, records base, head, stat and patch, checks
 * the patch for every secret the worker holds, and pushes and opens a pull request as the agent's `deliver` says —
 * each step idempotent, so a retried activity makes one commit, one push and one pull request.
 */
import { ApplicationFailure, Context } from '@temporalio/activity';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { FailureTypes } from '../contracts/failures.js';
import {
  DIFF_STAT_KEEP_CHARS,
  GIT_REF_NAME,
  GIT_REF_NAME_RULE,
  githubRepositoryOf,
  repositorySourceAllowed,
  repositorySourceProblem,
  type DeliverableView,
  type RepositoryRequest,
  type RunRepository,
} from '../contracts/repository.js';
import type { RunOutcome } from '../contracts/run.js';
import { GitHubPublisher, PublishError } from '../git/publisher.js';
import { pushBranch, PushRefused, remoteAuth } from '../git/push.js';
import { checkout, commitWork, DeliverableRefused, GitError, mirrorOf } from '../git/repository.js';
import { findSecrets, findSecretsInText, SecretScanIncomplete, type NamedSecret } from '../git/secrets.js';
import { CredentialMissingError, knownSecrets, resolveCredentials } from '../credentials/index.js';
import type { SandboxRef } from '../sandbox/types.js';
import type { FrozenSpec } from '../spec/index.js';
import type { Deps } from './deps.js';
import { waitForLedger } from './ledger-wait.js';

const execFileAsync = promisify(execFile);

/** Where this worker keeps its mirrors and the runs' git directories (`<dataDir>/git` under a worker). */
export function gitRootOf(deps: Pick<Deps, 'gitRoot'>): string {
  return deps.gitRoot ?? path.join(os.tmpdir(), 'durable-harness-git');
}

/** The run's own git directory on this worker (outside every workspace). */
export function runGitDir(deps: Pick<Deps, 'gitRoot'>, workflowId: string): string {
  return path.join(gitRootOf(deps), 'runs', `${createHash('sha256').update(workflowId).digest('hex').slice(0, 24)}.git`);
}

/** Removes the run's git directory, if it has one here (idempotent). */
export function removeRunGitDir(deps: Pick<Deps, 'gitRoot'>, workflowId: string): void {
  rmSync(runGitDir(deps, workflowId), { recursive: true, force: true });
}

/** Written last by a checkout: a retried start finds the run's repository ready and does nothing again. */
const READY_FILE = 'durable-harness-run.json';

/** One mirror update at a time per source on this worker (two runs starting on one repository share it). */
const mirrorQueue = new Map<string, Promise<unknown>>();
function serialized<T>(key: string, work: () => Promise<T>): Promise<T> {
  const next = (mirrorQueue.get(key) ?? Promise.resolve()).catch(() => undefined).then(work);
  mirrorQueue.set(key, next);
  void next.finally(() => mirrorQueue.get(key) === next && mirrorQueue.delete(key)).catch(() => undefined);
  return next;
}

function refused(message: string): never {
  throw ApplicationFailure.nonRetryable(message, FailureTypes.RepositoryInvalid);
}

/** The source, ref and branch of a run: the agent's defaults, overridden by the start input as the agent allows. */
export function repositoryOfRun(spec: FrozenSpec, request: RepositoryRequest | undefined, workflowId: string): { source: string; ref: string; branch: string } | undefined {
  const config = spec.agent.repository;
  if (!config) {
    if (request) refused(`Agent "${spec.agent.name}" has no repository in the catalog, and this run asks for one: add a repository block to the agent (its sources name what a start may ask for).`);
    return undefined;
  }
  const source = request?.source ?? config.source;
  if (source === undefined) refused(`Agent "${spec.agent.name}" has a repository block without a source, and this run names none: pass repository.source when starting the run, or set it in the catalog.`);
  const problem = repositorySourceProblem(source);
  if (problem) refused(problem);
  if (!repositorySourceAllowed(source, config)) {
    refused(`Repository source ${JSON.stringify(source.slice(0, 200))} is not one agent "${spec.agent.name}" allows: add it (or a prefix ending in "/") to the agent's repository.sources in the catalog.`);
  }
  const ref = request?.ref ?? config.ref ?? 'HEAD';
  const branch = request?.branch ?? `${config.branchPrefix}/${workflowId.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+|\.lock$/g, '') || 'run'}`;
  for (const [what, name] of [['ref', ref], ['branch', branch]] as const) {
    if (!GIT_REF_NAME.test(name)) {
      refused(`Repository ${what} ${JSON.stringify(name.slice(0, 200))} is not a git ref name the worker uses: ${GIT_REF_NAME_RULE}.`);
    }
  }
  return { source, ref, branch };
}

/**
 * Checks the run's repository out into `sandbox`'s workspace (on this worker) and returns what the workflow keeps;
 * undefined when the agent runs on no repository. `at`: check out this commit (a fresh workspace after a lost host).
 */
export async function prepareRepository(
  deps: Deps,
  spec: FrozenSpec,
  input: { readonly workflowId: string; readonly repository?: RepositoryRequest; readonly at?: RunRepository },
  sandbox: SandboxRef,
): Promise<RunRepository | undefined> {
  const run = input.at ?? repositoryOfRun(spec, input.repository, input.workflowId);
  if (!run) return undefined;
  const config = spec.agent.repository!;
  const gitDir = runGitDir(deps, input.workflowId);
  const workTree = sandbox.hostWorkspacePath;
  const ready = readReady(gitDir, workTree);
  if (ready) return ready;
  rmSync(gitDir, { recursive: true, force: true });
  let auth: ReturnType<typeof remoteAuth>;
  try {
    auth = remoteAuth(run.source, config.credential ? credentialOf(deps, config.credential, 'repository.credential') : undefined);
  } catch (err) {
    if (err instanceof PushRefused) refused(err.message);
    throw err;
  }
  let mirror: string;
  try {
    mirror = (await serialized(run.source, () => mirrorOf(path.join(gitRootOf(deps), 'mirrors'), run.source, { env: auth.env, timeoutMs: 10 * 60_000 }))).path;
  } catch (err) {
    if (!(err instanceof GitError)) throw err;
    const message = `Repository ${JSON.stringify(run.source.slice(0, 200))} could not be fetched: ${auth.redact(err.message)}`;
    // A network or server fault: the start is retried (openRun's attempts); anything else will not change.
    if (err.transient) throw ApplicationFailure.retryable(message, FailureTypes.RepositoryUnreachable);
    refused(message);
  }
  const ref = input.at?.base ?? run.ref;
  let base: string;
  try {
    ({ base } = await checkout({ mirror, ref, branch: run.branch, gitDir, workTree }));
  } catch (err) {
    if (err instanceof GitError) refused(`Repository ${JSON.stringify(run.source.slice(0, 200))} has no commit at ref ${JSON.stringify(ref)}: ${err.message}`);
    throw err;
  }
  await giveTreeTo(workTree);
  const repository: RunRepository = { source: run.source, ref: run.ref, branch: run.branch, base, deliverOn: config.deliverOn as readonly RunOutcome[], deliver: config.deliver };
  writeFileSync(path.join(gitDir, READY_FILE), JSON.stringify({ ...repository, workTree }));
  return repository;
}

function readReady(gitDir: string, workTree: string): RunRepository | undefined {
  try {
    const { workTree: at, ...repository } = JSON.parse(readFileSync(path.join(gitDir, READY_FILE), 'utf8')) as RunRepository & { workTree: string };
    return at === workTree ? repository : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The checkout was written by the worker; the harness must own it as it owns its workspace. Every entry is given to
 * the workspace directory's owner (the sandbox user, or the container's uid), links themselves (`chown -h -P`: never
 * what they point to, never a directory through one). Nothing else has written in the tree yet: the harness starts
 * after this. One `chown -R` process, not a walk on the worker's event loop (20,000 files held it for 355 ms; the
 * child takes 145 ms off it).
 */
async function giveTreeTo(workTree: string): Promise<void> {
  if (process.geteuid?.() !== 0) return;
  const { uid, gid } = statSync(workTree);
  if (uid === 0 && gid === 0) return;
  await execFileAsync('chown', ['-R', '-h', '-P', `${uid}:${gid}`, '--', workTree]);
}

function credentialOf(deps: Deps, name: string, where: string): string {
  const value = deps.credentials.get(name);
  if (value === undefined || value === '') {
    throw ApplicationFailure.nonRetryable(`Credential "${name}" (${where}) is not in this worker's credential store: add it there (never in the catalog or the start input).`, FailureTypes.CredentialMissing);
  }
  return value;
}

export interface DeliverWorkInput {
  readonly workflowId: string;
  readonly specHash: string;
  readonly sandbox: SandboxRef;
  readonly repository: RunRepository;
  readonly status: RunOutcome;
  /** The run's result text, or why it ended otherwise (the commit message and the pull request's body). */
  readonly summary: string;
  readonly turn: number;
}

/** How often a delivery heartbeats: a worker lost mid-delivery is noticed within the workflow's heartbeat timeout. */
export const DELIVERY_HEARTBEAT_MS = 2_000;

/**
 * The run's deliverable: committed once, recorded, scanned, pushed and proposed as the agent says. It heartbeats
 * while it works, so a delivery on a worker that died is retried after the heartbeat timeout, not the 10 minutes a
 * push may take.
 */
export async function deliverWork(deps: Deps, input: DeliverWorkInput): Promise<DeliverableView> {
  const ctx = Context.current();
  ctx.heartbeat();
  const beat = setInterval(() => ctx.heartbeat(), DELIVERY_HEARTBEAT_MS);
  try {
    return await deliver(deps, input);
  } finally {
    clearInterval(beat);
  }
}

async function deliver(deps: Deps, input: DeliverWorkInput): Promise<DeliverableView> {
  const spec = await deps.loadSpec(input.specHash);
  const config = spec.agent.repository;
  const { branch, base } = input.repository;
  const mode = config?.deliver ?? 'commit';
  const view = (rest: Omit<DeliverableView, 'mode' | 'branch' | 'base'>): DeliverableView => ({ mode, branch, base, ...rest });
  if (!config) return view({ state: 'failed', problem: 'the run\'s frozen spec has no repository block' });
  const gitDir = runGitDir(deps, input.workflowId);
  if (!existsSync(path.join(gitDir, READY_FILE))) {
    return view({ state: 'failed', problem: `the run's git directory is not on this worker (${deps.hostQueue ?? 'no host queue'}): its workspace's host was lost` });
  }
  const author = config.author;
  const message = commitMessage(spec, input);
  let delivered;
  try {
    delivered = await commitWork({ gitDir, workTree: input.sandbox.hostWorkspacePath, base, runId: input.workflowId, message, author, maxFileBytes: config.maxFileBytes, maxPatchBytes: config.maxPatchBytes });
  } catch (err) {
    if (err instanceof DeliverableRefused) return record(deps, input, view({ state: 'refused', problem: `${err.message}: nothing was committed; shrink or delete them, or raise repository.maxFileBytes` }));
    throw err;
  }
  const stat = delivered.diffStat.length > DIFF_STAT_KEEP_CHARS ? `${delivered.diffStat.slice(0, DIFF_STAT_KEEP_CHARS)}…` : delivered.diffStat;
  const made = { head: delivered.head, files: delivered.files, diffStat: stat };
  if (!delivered.committed) return record(deps, input, view({ state: 'unchanged', ...made }));
  const patch = delivered.patch;
  const patchBytes = patch === undefined ? undefined : Buffer.byteLength(patch);
  if (patch === undefined || patchBytes === undefined || patchBytes > config.maxPatchBytes) {
    const size = patchBytes === undefined ? 'over' : `${patchBytes} bytes, over`;
    return record(deps, input, view({ state: 'refused', ...made, problem: `the patch is ${size} repository.maxPatchBytes (${config.maxPatchBytes}): it was not recorded or pushed; shrink the change or raise the cap` }));
  }
  const secrets = heldSecrets(deps, spec);
  let leaked: string[];
  try {
    leaked = [...findSecrets(patch, secrets), ...findSecretsInText(message, secrets)];
  } catch (err) {
    if (!(err instanceof SecretScanIncomplete)) throw err;
    return record(deps, input, view({ state: 'refused', ...made, problem: `the patch could not be checked for the worker's secrets (${err.message}): it was not recorded or pushed` }));
  }
  if (leaked.length > 0) {
    return record(deps, input, view({ state: 'refused', ...made, problem: `the diff holds the value of ${[...new Set(leaked)].join(', ')}: nothing was recorded or pushed; remove it from the work tree` }));
  }
  const blob = await waitForLedger(() => deps.blobs.put(patch));
  const patched = { ...made, patch: { blob, bytes: patchBytes } };
  if (mode === 'commit') return record(deps, input, view({ state: 'delivered', ...patched }));
  const token = config.credential ? credentialOf(deps, config.credential, 'repository.credential') : undefined;
  try {
    await pushBranch({ gitDir, remote: input.repository.source, branch, head: delivered.head, ...(token ? { token } : {}) });
  } catch (err) {
    if (err instanceof PushRefused) return record(deps, input, view({ state: 'refused', ...patched, problem: `push refused: ${err.message}` }));
    throw err;
  }
  const pushed = { remote: input.repository.source, branch };
  if (mode === 'push') return record(deps, input, view({ state: 'delivered', ...patched, pushed }));
  const pr = config.pullRequest;
  const apiToken = credentialOf(deps, pr?.credential ?? config.credential ?? '', 'repository.pullRequest.credential');
  const repository = pr?.repository ?? githubRepositoryOf(input.repository.source);
  if (!repository) return record(deps, input, view({ state: 'refused', ...patched, pushed, problem: `the pull request's owner/name cannot be read from ${JSON.stringify(input.repository.source.slice(0, 200))}: set repository.pullRequest.repository` }));
  const publisher = new GitHubPublisher({ token: apiToken, ...(pr?.apiUrl ? { apiUrl: pr.apiUrl } : {}) });
  const baseBranch = pr?.base ?? (input.repository.ref !== 'HEAD' && !/^[0-9a-f]{7,64}$/.test(input.repository.ref) ? input.repository.ref.replace(/^refs\/heads\//, '') : 'main');
  try {
    const opened = await publisher.open({ repository, head: branch, base: baseBranch, title: message.split('\n')[0]!, body: pullRequestBody(input, stat) });
    return record(deps, input, view({ state: 'delivered', ...patched, pushed, pullRequest: { url: opened.url, number: opened.number } }));
  } catch (err) {
    // A refusal by the API (4xx but a rate limit) will not change on a retry; anything else is tried again.
    if (err instanceof PublishError && err.status !== undefined && err.status >= 400 && err.status < 500 && err.status !== 429 && err.status !== 408) {
      return record(deps, input, view({ state: 'refused', ...patched, pushed, problem: `the pull request was refused: ${err.message}` }));
    }
    throw err;
  }
}

function pullRequestBody(input: DeliverWorkInput, stat: string): string {
  const summary = input.summary.length > 8000 ? `${input.summary.slice(0, 8000)}…` : input.summary;
  return `${summary}\n\n---\nRun \`${input.workflowId}\` (${input.status}) by durable-harness.\n\n\`\`\`\n${stat}\n\`\`\`\n`;
}

function commitMessage(spec: FrozenSpec, input: DeliverWorkInput): string {
  const first = input.summary.split('\n').find((l) => l.trim() !== '')?.trim() ?? '';
  const subject = first ? (first.length > 72 ? `${first.slice(0, 71)}…` : first) : `${spec.agent.name}: run ${input.workflowId}`;
  const body = input.summary.length > 4000 ? `${input.summary.slice(0, 4000)}…` : input.summary;
  return `${subject}\n\n${body}\n\nDurable-Harness-Agent: ${spec.agent.name}\nDurable-Harness-Outcome: ${input.status}`;
}

/** The deliverable in the run's events (the result carries it into the run's ledger row at the end). */
async function record(deps: Deps, input: DeliverWorkInput, view: DeliverableView): Promise<DeliverableView> {
  await waitForLedger(() => deps.ledger.appendEvent(input.workflowId, input.turn, 'deliverable', view));
  return view;
}

/**
 * Every secret the worker holds, named by what holds it: the run's grants and vendor key as its turns resolve them
 * (store or server variable, the vendor-key fallback), the repository's credentials, then every other secret the
 * worker's redaction knows of (`knownSecrets`: every agent's grants, every fallback, the whole store).
 */
function heldSecrets(deps: Deps, spec: FrozenSpec): NamedSecret[] {
  const named = new Map<string, string>();
  let resolved: Readonly<Record<string, string>> = {};
  try {
    resolved = resolveCredentials({ agent: { name: spec.agent.name, credentials: [...spec.agent.credentials] }, harness: spec.harness, store: deps.credentials, env: deps.env }).env;
  } catch (err) {
    if (!(err instanceof CredentialMissingError)) throw err; // an unmet grant has no value to find
  }
  for (const [variable, value] of Object.entries(resolved)) named.set(value, variable === spec.harness.apiKeyEnv ? `the vendor key ${variable}` : `credential grant ${variable}`);
  for (const name of [spec.agent.repository?.credential, spec.agent.repository?.pullRequest?.credential]) {
    const value = name ? deps.credentials.get(name) : undefined;
    if (value && !named.has(value)) named.set(value, `credential ${name}`);
  }
  let catalog: ReturnType<Deps['catalog']> | undefined;
  try {
    catalog = deps.catalog();
  } catch {
    catalog = undefined; // a broken catalog still leaves the store's values below
  }
  for (const value of knownSecrets(catalog ?? { agents: [], harnesses: [] }, deps.credentials, deps.env)) if (!named.has(value)) named.set(value, "a secret the worker holds");
  return [...named].map(([value, name]) => ({ name, value }));
}
