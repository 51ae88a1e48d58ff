/** The `durable-harness` commands: parse, dispatch, and map every outcome to a documented exit code. */
import { err, out, outRaw } from './io.js';
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  Client,
  Connection,
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  isGrpcCancelledError,
  isGrpcDeadlineError,
  isGrpcServiceError,
} from '@temporalio/client';
import { CatalogError, CatalogMismatchError } from '../catalog/index.js';
import { LedgerBlobStore } from '../blobs/index.js';
import { InvalidRunInputError, RunIdTakenError, RunRejectedError, checkReply, checkRunInput, createAgentClient, getAgentRun, startAgentRun, type AgentRunHandle } from '../client/index.js';
import {
  CodecAuthConfigError,
  PayloadKeyConfigError,
  codecTokensFromEnvironment,
  dataConverterFromEnvironment,
  generateCodecToken,
  parseCorsOrigins,
  payloadCodecFromEnvironment,
  requireCodecTokens,
  startCodecServer,
} from '../codec/index.js';
import { LedgerConfigError, LedgerOpenError, describeLedger, type Ledger } from '../ledger/index.js';
import { DockerUnavailable } from '../sandbox/docker-errors.js';
import { ObservabilityConfigError } from '../observability/index.js';
import { livePollers, taskQueuePollers } from '../temporal/task-queue.js';
import { TemporalConfigError, refuseApiKeyArgument } from '../client/connect.js';
import { operatorInputLimits } from '../workflows/messages.js';
import { roundUsd } from '../contracts/money.js';
import type { AgentRunResult, RunStatusView } from '../workflows/types.js';
import { totalTokens } from '../contracts/usage.js';
import { deliverableLine, type DeliverableView } from '../contracts/repository.js';
import { escapeControl } from './escape.js';
import {
  MAX_READ_TOKEN_TTL_MS,
  OperatorConfigError,
  OperatorKeyError,
  generateOperatorKey,
  mintReadToken,
  operatorSignerFrom,
  operatorsFromEnvironment,
  writeOperatorKeyFile,
} from '../operators/index.js';
import { CliError, ExitCodes, exitCodeForResult, exitCodeForStatus, waitingApproval, type ExitCode } from './exit-codes.js';
import { describeResult, followRun, humanStates, progressLine } from './follow.js';
import { formatApprovals, parseEdit, parseScope, pendingApprovals, permissionLines } from './approvals.js';
import { ledgerStatus, ledgerStatusLines } from './ledger-status.js';
import { formatLoopbackTable, hasNetworkRows, networkLines, networkPage } from './network.js';
import { noWorkerMessage, silentWorker } from './silence.js';
import { formatTable, listRuns, listStatuses, type ListFilters, type ListStatus } from './list.js';
import { commandsOf, quickAnswer } from './help.js';
import { usage } from './usage.js';
import { logsCommand } from './logs.js';
import { connectOptionsFor, openLedgerIfPresent, resolveSettings, unreachableError, type Settings } from './settings.js';


/** parseArgs options of one type, by name. */
function optionsOf<const N extends string, const T extends 'string' | 'boolean'>(type: T, names: readonly N[]): Record<N, { type: T }> {
  return Object.fromEntries(names.map((name) => [name, { type }])) as Record<N, { type: T }>;
}

const options = {
  ...optionsOf('string', [
    'address', 'namespace', 'task-queue', 'catalog', 'data', 'port', 'ui-port', 'id',
    'tenant', 'user', 'agent', 'status', 'reason', 'file', 'edit', 'scope',
    'by', 'limit', 'codec-port', 'key', 'name', 'out', 'ttl', 'after', 'repo', 'ref', 'branch',
    'profile', 'config-file', 'tls-cert-path', 'tls-key-path', 'tls-ca-path', 'tls-server-name', 'output',
  ]),
  ...optionsOf('boolean', ['demo', 'exit', 'detach', 'wait', 'json', 'allow-encode', 'refused', 'loopback', 'stat', 'tls']),
  'cors-origin': { type: 'string', multiple: true },
  since: { type: 'string' },
  follow: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'V' },
} as const;

export type Flags = ReturnType<typeof parseArgs<{ options: typeof options; allowPositionals: true }>>['values'];

/** How long an operator command waits for a worker to take it. */
const operatorTimeoutMs = 10_000;
/** How long `status` waits for the run's answer. */
const statusTimeoutMs = 3000;

const jsonLine = (value: unknown) => out(JSON.stringify(value));

/** The command being run, once it is known: a usage error points at its help. */
let usageTopic: string | undefined;

/** A usage error: one line, and the help that answers it (not the whole usage). */
function usageError(message: string): CliError {
  return new CliError(`${message}\n  see: durable-harness ${usageTopic ? `help ${usageTopic}` : '--help'}`, ExitCodes.usage);
}

async function connectClient(s: Settings): Promise<{ client: Client; connection: Connection }> {
  // Payload keys and certificate files are checked before connecting: configuration errors, not an unreachable server.
  const dataConverter = dataConverterFromEnvironment();
  const connectOptions = await connectOptionsFor(s);
  try {
    const connection = await Connection.connect({ ...connectOptions, connectTimeout: 5000 });
    return { client: createAgentClient(connection, { namespace: s.namespace, dataConverter }), connection };
  } catch (e) {
    throw await unreachableError(s, e);
  }
}

/** Shell-quotes one argument for a command the user can paste. */
function shellQuote(arg: string): string {
  return /^[A-Za-z0-9._:/=@%+,-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** A command's argv, with the connection flags this command was given. */
function commandArgv(flags: Flags): (...args: string[]) => string[] {
  const connectionFlags = ['address', 'namespace', 'profile', 'config-file', 'tls-ca-path', 'tls-cert-path', 'tls-key-path', 'tls-server-name'] as const;
  const tail = [...connectionFlags.flatMap((name) => (flags[name] ? [`--${name}`, flags[name]] : [])), ...(flags.tls ? ['--tls'] : [])];
  return (...args: string[]) => ['durable-harness', ...args, ...tail];
}

/** A command the user can paste, with the connection flags this command was given. */
function commandLine(flags: Flags): (...args: string[]) => string {
  const argv = commandArgv(flags);
  return (...args: string[]) => argv(...args).map(shellQuote).join(' ');
}

/** The exact commands (argv) that answer a run waiting for a person, with the connection flags this command was given. */
export function answerArgv(status: Pick<RunStatusView, 'state' | 'pendingApprovals'>, workflowId: string, flags: Flags): string[][] {
  const command = commandArgv(flags);
  if (status.state === 'awaiting_operator') return [command('retry', workflowId), command('abandon', workflowId, '--reason', 'why')];
  if (status.state === 'waiting_for_reply') return [command('reply', workflowId, 'your answer')];
  const request = waitingApproval(status);
  if (request) return [command('approve', workflowId, request.requestId), command('deny', workflowId, request.requestId, '--reason', 'why')];
  return [];
}

/** The same commands as lines a user can paste. */
export function answerCommands(status: Pick<RunStatusView, 'state' | 'pendingApprovals'>, workflowId: string, flags: Flags): string[] {
  return answerArgv(status, workflowId, flags).map((argv) => argv.map(shellQuote).join(' '));
}

/** The `needs-human` JSON line: the commands as paste-able lines and as argv (for a script to run without a shell). */
function needsHumanJson(status: RunStatusView, workflowId: string, flags: Flags) {
  return { type: 'needs-human', workflowId, state: status.state, detail: status.detail, commands: answerCommands(status, workflowId, flags), argv: answerArgv(status, workflowId, flags) };
}

function needsHumanText(status: RunStatusView, workflowId: string, flags: Flags): string {
  const [first, second] = answerCommands(status, workflowId, flags);
  if (status.state === 'waiting_for_reply') {
    return `run ${workflowId} waits for a reply to: ${escapeControl(status.pendingQuestion ?? status.detail)}\n  answer it:  ${first}`;
  }
  const r = waitingApproval(status);
  if (r) {
    const more = status.pendingApprovals!.length > 1 ? ` (${status.pendingApprovals!.length} in all: durable-harness approvals ${shellQuote(workflowId)})` : '';
    return (
      `run ${workflowId} waits for an operator to decide a permission request${more}: ${escapeControl(r.kind)} · ${escapeControl(r.tool)}: ${escapeControl(r.title)}\n` +
      `  allow it:  ${first}\n  or deny:   ${second}`
    );
  }
  return `run ${workflowId} awaits an operator: ${escapeControl(status.lastError ?? status.detail)}\n  retry the turn:  ${first}\n  or give up:      ${second}`;
}

function progressJson(workflowId: string, status: RunStatusView, doing: string | undefined) {
  return {
    type: 'progress',
    workflowId,
    state: status.state,
    iteration: status.iteration,
    totalTokens: status.totalTokens,
    costUsd: roundUsd(status.costUsd),
    costBlind: status.costBlind,
    detail: status.detail,
    ...(doing ? { doing } : {}),
    ...(status.inFlight ? { inFlight: status.inFlight } : {}),
  };
}

/** Refuses to start a run nobody would pick up (a worker of this host that is gone does not count). */
async function requireWorker(connection: Connection, s: Settings): Promise<void> {
  const pollers = livePollers(await taskQueuePollers(connection.workflowService, s.namespace, s.taskQueue));
  if (!pollers.some((p) => p.kinds.includes('workflow'))) throw new CliError(noWorkerMessage({ ...s, what: 'nothing started' }), ExitCodes.noWorker);
}

async function followToEnd(run: AgentRunHandle, s: Settings, flags: Flags): Promise<ExitCode> {
  const ledger = openLedgerIfPresent(s);
  const stop = () => {
    err(`\nstopped following ${run.workflowId}; the run goes on: durable-harness status ${shellQuote(run.workflowId)}`);
    process.exit(ExitCodes.interrupted);
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const end = await followRun(run, {
      ledger,
      wait: flags.wait,
      onProgress: (status, doing) => (flags.json ? jsonLine(progressJson(run.workflowId, status, doing)) : out(progressLine(status, doing))),
      onNeedsHuman: (status) =>
        flags.json
          ? jsonLine(needsHumanJson(status, run.workflowId, flags))
          : out(needsHumanText(status, run.workflowId, flags)),
    });
    switch (end.kind) {
      case 'ended':
        if (flags.json) jsonLine({ type: 'result', ...end.result });
        else out(describeResult(end.result));
        return exitCodeForResult(end.result);
      case 'needs-human': {
        if (flags.json) jsonLine(needsHumanJson(end.status, run.workflowId, flags));
        else out(needsHumanText(end.status, run.workflowId, flags));
        return exitCodeForStatus(end.status);
      }
      default:
        throw await silentWorker(run.handle.client, { ...s, what: `run ${run.workflowId} got no answer for ${Math.round(end.silentForMs / 1000)} s`, waitedMs: end.silentForMs });
    }
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    await ledger?.close();
  }
}

/** A status view for a run that has ended, from its result in history: needs no worker. */
function viewFromResult(result: AgentRunResult, agent: string): RunStatusView {
  return {
    state: result.status,
    agent,
    // Counters the result does not carry: this view is built from history, not from the run's state.
    deadlineMs: 0,
    childIterations: 0,
    stepSeq: 0,
    attributes: {},
    continuedTimes: 0,
    iteration: result.iterations,
    usage: result.usage,
    totalTokens: totalTokens(result.usage),
    costUsd: roundUsd(result.costUsd),
    costBlind: result.costBlind === true,
    detail: result.reason ?? result.result?.slice(0, 120) ?? result.status,
    ...(result.failureType ? { lastError: `${result.failureType}: ${result.reason ?? ''}` } : {}),
    externalSessionId: result.externalSessionId,
    malformedInARow: 0,
    actionCounts: {},
  };
}

/** Temporal's own status of a run that ended without a result (terminated, timed out), as an exit code. */
function exitCodeForClosed(temporalStatus: string): ExitCode {
  return temporalStatus === 'CANCELLED' ? ExitCodes.cancelled : ExitCodes.failed;
}

async function statusCommand(client: Client, s: Settings, flags: Flags, id: string): Promise<ExitCode> {
  const run = getAgentRun(client, id);
  const description = await run.handle.describe();
  let view: RunStatusView | undefined;
  let ended: AgentRunResult | undefined;
  if (description.status.name === 'RUNNING') {
    const startedAt = Date.now();
    try {
      view = await run.status({ timeoutMs: statusTimeoutMs });
    } catch (e) {
      if (e instanceof WorkflowNotFoundError) throw e;
      if (!unanswered(e, startedAt, statusTimeoutMs)) throw new CliError(`run ${id}: its status query failed: ${(e as Error).message}${causeOf(e)}`, ExitCodes.internal);
    }
  }
  // The books: the ledger's totals over every attempt (failed ones included) and whether it can be written.
  const ledger = openLedgerIfPresent(s);
  const books = await ledgerStatus(run, ledger).finally(() => ledger?.close());
  if (description.status.name !== 'RUNNING') {
    // Ended: the result is in history, no worker needed. A terminated or timed-out run has none: its status query
    // would answer the state it was in, so Temporal's own status says how it ended.
    const agent = String(description.searchAttributes?.DurableHarnessAgent?.[0] ?? '');
    try {
      ended = await run.result();
      view = viewFromResult(ended, agent);
    } catch (e) {
      const message = `run ${id} ended ${description.status.name}: ${escapeControl(((e as Error).cause as Error | undefined)?.message ?? (e as Error).message)}`;
      if (flags.json) jsonLine({ workflowId: id, status: description.status.name.toLowerCase(), temporalStatus: description.status.name, message, ledger: books });
      else for (const line of [message, ...ledgerStatusLines(books)]) out(line);
      return exitCodeForClosed(description.status.name);
    }
  }
  if (!view) {
    const status = String(description.searchAttributes?.DurableHarnessStatus?.[0] ?? 'unknown');
    const problem = books.problem ? ` (ledger NOT WRITABLE: ${books.problem})` : '';
    throw await silentWorker(client, { ...s, taskQueue: description.taskQueue, what: `run ${id} is open (DurableHarnessStatus ${status}${problem}) but its status query got no answer`, waitedMs: statusTimeoutMs });
  }
  if (flags.json) out(JSON.stringify({ ...view, ...(ended?.deliverable ? { deliverable: ended.deliverable } : {}), ledger: books }, null, 2));
  else {
    out(progressLine(view));
    // An open run's last problem (a refused envelope, a permission flood, a forgotten session); awaiting an operator
    // says it below, and an ended run's reason is its detail.
    if (view.lastError && description.status.name === 'RUNNING' && view.state !== 'awaiting_operator') out(`last problem: ${escapeControl(view.lastError)}`);
    // The outcome is decided, but the sandbox, credentials and ledger record are not closed: never a silent `succeeded`.
    if (view.sessionEnd) out(`session end FAILING (${view.sessionEnd.failures} round(s), retried until it succeeds): ${escapeControl(view.sessionEnd.lastError)}`);
    for (const line of permissionLines(view, id, commandLine(flags))) out(line);
    if (ended?.deliverable) out(`deliverable: ${escapeControl(deliverableLine(ended.deliverable))} (durable-harness diff ${escapeControl(id)})`);
    else if (view.repository) out(`repository: ${escapeControl(view.repository.source)} @ ${view.repository.base.slice(0, 12)} on branch ${escapeControl(view.repository.branch)} (delivers: ${view.repository.deliver} on ${view.repository.deliverOn.join(', ')})`);
    for (const line of ledgerStatusLines(books)) out(line);
    if (humanStates.has(view.state)) out(needsHumanText(view, id, flags));
  }
  // An ended run exits as `run` would have: a configuration failure is 2, like any configuration error.
  return ended ? exitCodeForResult(ended) : exitCodeForStatus(view);
}

/**
 * Whether a call made at `startedAt` with `timeoutMs` got no answer: its deadline passed. gRPC reports that as
 * DEADLINE_EXCEEDED, or, when the deadline's timer and the call's end race, as CANCELLED (this command cancels nothing).
 */
function unanswered(e: unknown, startedAt: number, timeoutMs: number): boolean {
  return isGrpcDeadlineError(e) || (isGrpcCancelledError(e) && Date.now() - startedAt >= timeoutMs - 50);
}

/** Runs an operator command on run `id` with a deadline, so a run without a worker (or a busy one) does not hang the command. */
async function operate<T>(client: Client, s: Settings, id: string | undefined, fn: () => Promise<T>): Promise<T> {
  const startedAt = Date.now();
  try {
    return await client.withDeadline(startedAt + operatorTimeoutMs, fn);
  } catch (e) {
    if (!unanswered(e, startedAt, operatorTimeoutMs)) throw e;
    const taskQueue = id ? await client.workflow.getHandle(id).describe().then((d) => d.taskQueue, () => s.taskQueue) : s.taskQueue;
    throw await silentWorker(client, { ...s, taskQueue, what: `the command${id ? ` to run ${id}` : ''} got no answer`, waitedMs: operatorTimeoutMs });
  }
}

/** A run whose decisions are signed with the operator key of `--key` / DURABLE_HARNESS_OPERATOR_KEY(_FILE), if given. */
function decisionRun(client: Client, id: string, flags: Flags): AgentRunHandle {
  const operator = operatorSignerFrom(flags.key);
  return getAgentRun(client, id, operator ? { operator } : {});
}

/** `--ttl 30m|8h|90s`: a duration up to a read token's longest life. */
function parseDuration(text: string): number {
  const m = /^(\d+)(s|m|h)$/.exec(text.trim());
  const ms = m ? Number(m[1]) * { s: 1000, m: 60_000, h: 3600_000 }[m[2] as 's' | 'm' | 'h'] : NaN;
  if (!(ms > 0) || ms > MAX_READ_TOKEN_TTL_MS) throw usageError(`--ttl must be a duration like 30m or 8h, at most 12h; got "${text}"`);
  return ms;
}

/** `operator keygen --name NAME [--out FILE]`: a new key file (mode 0600) and the line for the workers' operators file. */
function operatorCommand(args: readonly string[], flags: Flags): ExitCode {
  const [sub] = args;
  if (sub === 'token') {
    const signer = operatorSignerFrom(flags.key);
    if (!signer) throw usageError('operator token needs your key: --key FILE or DURABLE_HARNESS_OPERATOR_KEY_FILE');
    const ttlMs = parseDuration(flags.ttl ?? '8h');
    out(mintReadToken(signer, { namespaces: flags.namespace ? [flags.namespace] : ['*'], ttlMs }));
    return ExitCodes.succeeded;
  }
  if (sub !== 'keygen') throw usageError(`unknown operator command "${sub ?? ''}": use \`durable-harness operator keygen --name NAME [--out FILE]\` or \`operator token\``);
  const name = flags.name;
  if (!name || !/^[\w.@-]{1,64}$/.test(name)) throw usageError('operator keygen needs --name NAME (1-64 letters, digits and ._@-), the name the workers\' operators file gives you');
  const file = flags.out ?? `${name}.operator-key.json`;
  const key = generateOperatorKey(name);
  writeOperatorKeyFile(file, key);
  out(`wrote ${file} (mode 0600; keep it to yourself). Sign with: --key ${file}  or  DURABLE_HARNESS_OPERATOR_KEY_FILE=${file}`);
  out('Add this to the workers\' operators file (DURABLE_HARNESS_OPERATORS_FILE), with the roles you are to have:');
  out(`  - name: ${name}\n    roles: [approve, operate]\n    keys: ["${key.publicKey}"]   # key id ${key.keyId}`);
  return ExitCodes.succeeded;
}

/** The gRPC reason under a client error, when it adds something. */
function causeOf(e: unknown): string {
  const cause = (e as { cause?: unknown }).cause;
  return cause instanceof Error && cause.message ? ` (${cause.message})` : '';
}

async function withClient(flags: Flags, fn: (client: Client, s: Settings, connection: Connection) => Promise<ExitCode>): Promise<ExitCode> {
  const s = resolveSettings(flags);
  const { client, connection } = await connectClient(s);
  try {
    return await fn(client, s, connection);
  } catch (e) {
    if (e instanceof WorkflowNotFoundError && e.workflowId) {
      // Signals and updates to a closed run also land here: say which it is.
      const status = await client.workflow.getHandle(e.workflowId).describe().then((d) => d.status.name, () => undefined);
      if (status) throw new CliError(`run ${e.workflowId} has already ended (${status}); it takes no more commands`, ExitCodes.rejected);
      throw new CliError(`no run with id ${e.workflowId} in namespace ${s.namespace}`, ExitCodes.usage);
    }
    if (isGrpcServiceError(e) && e.code === 14) throw await unreachableError(s, e);
    throw e;
  } finally {
    await connection.close();
  }
}

/** The reply's text: the words after the run id, or `--file FILE` (`-`: standard input), never both. */
function replyText(words: string[], file: string | undefined): string {
  if (file === undefined) {
    if (words.length === 0) throw usageError('missing TEXT: durable-harness reply RUN_ID TEXT, or --file FILE');
    return words.join(' ');
  }
  if (words.length > 0) throw usageError('give the reply as TEXT or with --file, not both');
  const { maxReplyBytes } = operatorInputLimits;
  try {
    if (file !== '-' && statSync(file).size > maxReplyBytes) {
      throw new CliError(`the reply in ${file} is ${statSync(file).size} bytes, over the limit of ${maxReplyBytes} bytes (4 MiB); nothing was sent`, ExitCodes.usage);
    }
    return readAtMost(file === '-' ? 0 : openSync(file, 'r'), maxReplyBytes + 1);
  } catch (e) {
    if (e instanceof CliError) throw e;
    throw new CliError(`cannot read the reply from ${file === '-' ? 'standard input' : file}: ${(e as Error).message}`, ExitCodes.usage);
  }
}

/** Reads up to `limit` bytes from `fd` as UTF-8 (a larger input is cut there, and then refused as too large). */
function readAtMost(fd: number, limit: number): string {
  const buffer = Buffer.alloc(limit);
  let length = 0;
  for (let n; length < limit && (n = readSync(fd, buffer, length, limit - length, null)) > 0; ) length += n;
  if (fd !== 0) closeSync(fd);
  return buffer.subarray(0, length).toString('utf8');
}

/** The ledger that holds `workflowId`'s run on this machine, for a reply that goes by reference; else why not (exit 2). */
async function ledgerOfRun(s: Settings, workflowId: string, chars: number): Promise<Ledger> {
  const why = `the reply is ${chars} characters, over the inline limit of ${operatorInputLimits.inlineReplyChars}: it travels by reference through the workers' ledger`;
  const ledger = openLedgerIfPresent(s);
  if (!ledger) {
    throw new CliError(`${why}, and this machine has none (no DATABASE_URL, no ${path.join(s.dataDir, 'ledger.sqlite')}). Run the command where the workers' ledger is (--data DIR or DATABASE_URL), or shorten the reply; nothing was sent`, ExitCodes.usage);
  }
  if (!(await ledger.getRun(workflowId))) {
    await ledger.close();
    throw new CliError(`${why}, and the ledger here (${describeLedger(process.env, s.dataDir)}) does not hold run ${workflowId}. Point --data or DATABASE_URL at the workers' ledger; nothing was sent`, ExitCodes.usage);
  }
  return ledger;
}

function need(positionals: string[], count: number, what: string): string[] {
  if (positionals.length < count) throw usageError(`missing ${what}`);
  return positionals;
}

function listFilters(flags: Flags): ListFilters {
  const limit = Number(flags.limit ?? 20);
  if (!Number.isInteger(limit) || limit < 1) throw usageError(`--limit must be a positive whole number, got "${flags.limit}"`);
  if (flags.status && !listStatuses.includes(flags.status as ListStatus)) throw usageError(`--status must be one of ${listStatuses.join(', ')}; got "${flags.status}"`);
  return { limit, status: flags.status as ListFilters['status'], agent: flags.agent, tenant: flags.tenant };
}

/** Runs one command to its exit code; a failure is printed as `durable-harness: …` with its code (exit-codes.ts). */
export async function runCommand(argv: string[]): Promise<ExitCode> {
  try {
    return await main(argv);
  } catch (e) {
    const { code, message } = exitFor(e);
    err(`durable-harness: ${message}`);
    return code;
  }
}

export async function main(argv: string[]): Promise<ExitCode> {
  const quick = quickAnswer(argv);
  if (quick) {
    if (quick.out !== undefined) out(quick.out);
    if (quick.err !== undefined) err(quick.err);
    return quick.code;
  }
  let parsed: ReturnType<typeof parseArgs<{ options: typeof options; allowPositionals: true }>>;
  // Until the arguments are parsed, the first word names the command a usage error points at.
  usageTopic = argv[0] !== undefined && commandsOf(usage).includes(argv[0]) ? argv[0] : undefined;
  refuseApiKeyArgument(argv);
  try {
    parsed = parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (e) {
    throw usageError((e as Error).message);
  }
  const { values: flags, positionals } = parsed;
  const [command, ...rest] = positionals;
  usageTopic = command && commandsOf(usage).includes(command) ? command : undefined;
  if (!command) throw usageError('no command given');
  if (flags.output !== undefined) {
    if (flags.output !== 'json' && flags.output !== 'table') throw usageError(`--output must be json or table, got "${flags.output}"`);
    if (flags.output === 'table' && flags.json) throw usageError('--output table and --json disagree: give one');
    flags.json = flags.output === 'json';
  }
  switch (command) {
    case 'dev':
      // The worker's modules (SDK core, bundler, sandboxes) load only for the commands that run one.
      return (await import('./dev.js')).devCommand(flags, resolveSettings(flags, process.env, { embedded: true }));
    case 'worker':
      return (await import('./dev.js')).workerCommand(resolveSettings(flags));
    case 'codec-server':
      return codecServerCommand(flags);
    case 'operator':
      return operatorCommand(rest, flags);
    case 'codec-token':
      out(generateCodecToken());
      return ExitCodes.succeeded;
    case 'run': {
      const [agent, ...taskWords] = need(rest, 2, 'AGENT and TASK: durable-harness run AGENT TASK');
      const input = {
        agent: agent!,
        task: taskWords.join(' '),
        identity: { tenantId: flags.tenant ?? 'local', userId: flags.user ?? os.userInfo().username },
        workflowId: flags.id,
        ...repositoryFlags(flags),
      };
      // Bad ids or an oversized task are refused before anything is asked of Temporal.
      checkRunInput(input);
      return withClient(flags, async (client, s, connection) => {
        await requireWorker(connection, s);
        const run = await startAgentRun(client, { ...input, taskQueue: s.taskQueue });
        if (flags.detach) {
          out(flags.json ? JSON.stringify({ workflowId: run.workflowId }) : run.workflowId);
          return ExitCodes.succeeded;
        }
        if (flags.json) jsonLine({ type: 'started', workflowId: run.workflowId });
        else out(`started ${run.workflowId}`);
        return followToEnd(run, s, flags);
      });
    }
    case 'status': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, (client, s) => statusCommand(client, s, flags, id!));
    }
    case 'logs': {
      const [id] = need(rest, 1, 'RUN_ID: durable-harness logs RUN_ID');
      return withClient(flags, (client, s) => logsCommand(client, s, id!, { follow: flags.follow === true, json: flags.json === true, since: flags.since }));
    }
    case 'list':
      return withClient(flags, async (client) => {
        const filters = listFilters(flags);
        const rows = await listRuns(client, filters);
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else for (const line of formatTable(rows)) out(line);
        return ExitCodes.succeeded;
      });
    case 'cancel': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, async (client, s) => {
        await operate(client, s, id, () => decisionRun(client, id!, flags).cancel(flags.reason));
        out(`cancel requested for ${id}`);
        return ExitCodes.succeeded;
      });
    }
    case 'retry': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, async (client, s) => {
        out(await operate(client, s, id, () => decisionRun(client, id!, flags).retryTurn()));
        return ExitCodes.succeeded;
      });
    }
    case 'abandon': {
      const [id] = need(rest, 1, 'RUN_ID');
      return withClient(flags, async (client, s) => {
        await operate(client, s, id, () => decisionRun(client, id!, flags).abandon(flags.reason));
        out(`abandoned ${id}: it ends as failed`);
        return ExitCodes.succeeded;
      });
    }
    case 'reply': {
      const [id, ...words] = need(rest, 1, 'RUN_ID and TEXT (or --file FILE)');
      const text = replyText(words, flags.file);
      // Too large for any run: refused before anything is sent, with the cap.
      checkReply(text, true);
      return withClient(flags, async (client, s) => {
        // A long reply travels by reference: into the ledger's blob store first, where the run's workers read it.
        const ledger = text.length > operatorInputLimits.inlineReplyChars ? await ledgerOfRun(s, id!, text.length) : undefined;
        try {
          const blobs = ledger ? new LedgerBlobStore(ledger) : undefined;
          out(await operate(client, s, id, () => decisionRun(client, id!, flags).reply(text, { blobs })));
        } finally {
          await ledger?.close();
        }
        return ExitCodes.succeeded;
      });
    }
    case 'approvals': {
      const [id] = rest;
      return withClient(flags, async (client, s) => {
        const { rows, unanswered } = await operate(client, s, id, () => pendingApprovals(client, id));
        if (flags.json) out(JSON.stringify(rows, null, 2));
        else if (rows.length === 0) out(id ? `run ${id} has no permission request waiting` : 'no permission request is waiting');
        else for (const line of formatApprovals(rows)) out(line);
        for (const other of unanswered) err(`run ${other} has pending requests but no worker answered its status query`);
        return ExitCodes.succeeded;
      });
    }
    case 'network': {
      const [id] = need(rest, 1, 'RUN_ID: durable-harness network RUN_ID');
      return networkCommand(flags, id!);
    }
    case 'diff': {
      const [id] = need(rest, 1, 'RUN_ID: durable-harness diff RUN_ID');
      return diffCommand(flags, id!);
    }
    case 'approve':
    case 'deny': {
      const [id, request] = need(rest, 2, `RUN_ID and REQUEST: durable-harness ${command} RUN_ID REQUEST`);
      if (command === 'deny' && (flags.edit !== undefined || flags.scope !== undefined)) throw usageError('--edit and --scope go with approve, not deny');
      const edit = parseEdit(flags.edit);
      const scope = parseScope(flags.scope);
      const by = flags.by ?? os.userInfo().username;
      return withClient(flags, async (client, s) => {
        const run = decisionRun(client, id!, flags);
        const decided =
          command === 'approve'
            ? await operate(client, s, id, () => run.approve(request!, { by, ...(edit ? { edit } : {}), ...(scope ? { scope } : {}) }))
            : await operate(client, s, id, () => run.deny(request!, { by, ...(flags.reason !== undefined ? { reason: flags.reason } : {}) }));
        if (flags.json) out(JSON.stringify({ workflowId: id, ...decided }));
        else out(`${decided.status} ${request} of ${id} (${decided.decidedBy})${decided.editedInput !== undefined ? ` with input ${escapeControl(JSON.stringify(decided.editedInput))}` : ''}`);
        return ExitCodes.succeeded;
      });
    }
    default:
      throw usageError(`unknown command "${command}"`);
  }
}

/** A whole number flag of at least `min` (`--limit`, `--after`), or its default. */
function wholeFlag(flags: Flags, name: 'limit' | 'after', fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const text = flags[name];
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || value < min || value > max) throw usageError(`--${name} must be a whole number from ${min} to ${max}, got "${text}"`);
  return value;
}

/** `network RUN`: the run's gateway rows from the ledger on this machine; no Temporal server needed. */
async function networkCommand(flags: Flags, id: string): Promise<ExitCode> {
  const limit = wholeFlag(flags, 'limit', 100, 1, 1000);
  const afterSeq = wholeFlag(flags, 'after', 0, 0);
  const s = resolveSettings(flags);
  const ledger = openLedgerIfPresent(s);
  if (!ledger) {
    throw new CliError(`no ledger here to read run ${id}'s network from (no DATABASE_URL, no ${path.join(s.dataDir, 'ledger.sqlite')}). Run the command where the workers' ledger is (--data DIR or DATABASE_URL)`, ExitCodes.usage);
  }
  try {
    if (flags.loopback) return await loopbackCommand(flags, ledger, id, afterSeq, limit);
    const page = await networkPage(ledger, id, { afterSeq, limit, refusedOnly: flags.refused === true });
    if (!hasNetworkRows(page.summary) && !(await ledger.getRun(id))) {
      throw new CliError(`the ledger here (${describeLedger(process.env, s.dataDir)}) holds no run ${id}. Check the id (durable-harness list), or point --data or DATABASE_URL at the workers' ledger`, ExitCodes.usage);
    }
    if (flags.json) out(JSON.stringify(page, null, 2));
    else {
      const next = (after: number) => commandLine(flags)('network', id, ...(flags.refused ? ['--refused'] : []), ...(flags.limit ? ['--limit', String(limit)] : []), ...(flags.data ? ['--data', flags.data] : []), '--after', String(after));
      for (const line of networkLines(page, next, flags.refused === true)) out(line);
    }
    return ExitCodes.succeeded;
  } finally {
    await ledger.close();
  }
}

/** The start input's repository from `--repo`, `--ref`, `--branch` (absent when none is given). */
function repositoryFlags(flags: Flags): { repository?: { source?: string; ref?: string; branch?: string } } {
  if (flags.repo === undefined && flags.ref === undefined && flags.branch === undefined) return {};
  return { repository: { ...(flags.repo !== undefined ? { source: flags.repo } : {}), ...(flags.ref !== undefined ? { ref: flags.ref } : {}), ...(flags.branch !== undefined ? { branch: flags.branch } : {}) } };
}

/** `diff RUN`: the deliverable of a run on a repository, from the ledger (its record in the run's row, its patch a blob). */
async function diffCommand(flags: Flags, id: string): Promise<ExitCode> {
  const s = resolveSettings(flags);
  const ledger = openLedgerIfPresent(s);
  if (!ledger) {
    throw new CliError(`no ledger here to read run ${id}'s deliverable from (no DATABASE_URL, no ${path.join(s.dataDir, 'ledger.sqlite')}). Run the command where the workers' ledger is (--data DIR or DATABASE_URL)`, ExitCodes.usage);
  }
  try {
    const run = await ledger.getRun(id);
    if (!run) throw new CliError(`the ledger here (${describeLedger(process.env, s.dataDir)}) holds no run ${id}. Check the id (durable-harness list), or point --data or DATABASE_URL at the workers' ledger`, ExitCodes.usage);
    const deliverable = deliverableOf(run.result) ?? (await lastDeliverableEvent(ledger, id));
    if (!deliverable) {
      const why = run.finishedAt === undefined ? 'it has not ended yet (the deliverable is made at the end)' : 'it delivered nothing: no repository, or an outcome its agent does not deliver on';
      throw new CliError(`run ${escapeControl(id)} has no deliverable: ${why}`, ExitCodes.usage);
    }
    if (flags.json) {
      out(JSON.stringify({ workflowId: id, ...deliverable }, null, 2));
      return ExitCodes.succeeded;
    }
    if (flags.stat || !deliverable.patch) {
      out(`${escapeControl(id)}: ${escapeControl(deliverableLine(deliverable))}`);
      if (deliverable.diffStat) out(escapeControl(deliverable.diffStat));
      return deliverable.state === 'refused' || deliverable.state === 'failed' ? ExitCodes.failed : ExitCodes.succeeded;
    }
    const patch = await ledger.getBlob(deliverable.patch.blob);
    if (patch === undefined) throw new CliError(`run ${escapeControl(id)}'s patch (blob ${deliverable.patch.blob}) is not in this ledger`, ExitCodes.usage);
    // The patch as git wrote it, for `git apply`: bytes of the work tree, not escaped (pipe it, or use --stat).
    outRaw(patch);
    return ExitCodes.succeeded;
  } finally {
    await ledger.close();
  }
}

function deliverableOf(result: unknown): DeliverableView | undefined {
  const d = (result as { deliverable?: DeliverableView } | undefined)?.deliverable;
  return d && typeof d === 'object' && typeof d.state === 'string' ? d : undefined;
}

/** A run still ending (or one whose row was closed without it) has its deliverable in its events. */
async function lastDeliverableEvent(ledger: Ledger, id: string): Promise<DeliverableView | undefined> {
  let found: DeliverableView | undefined;
  for (let cursor = 0, pages = 0; pages < 100; pages++) {
    const events = await ledger.readEvents(id, cursor, 500);
    for (const e of events) if (e.type === 'deliverable') found = e.data as DeliverableView;
    if (events.length < 500) break;
    cursor = events.at(-1)!.cursor;
  }
  return found;
}

/** `network RUN --loopback`: the harness's reads through the run's MCP loopback (docs/mcp.md), a page at a time. */
async function loopbackCommand(flags: Flags, ledger: Ledger, id: string, afterSeq: number, limit: number): Promise<ExitCode> {
  const rows = await ledger.listLoopbackReads(id, { afterSeq, limit: Math.min(limit + 1, 1000) });
  const page = rows.slice(0, limit);
  const nextAfter = rows.length > limit ? page.at(-1)?.seq : undefined;
  if (flags.json) {
    out(JSON.stringify({ workflowId: id, reads: page, ...(nextAfter !== undefined ? { nextAfter } : {}) }, null, 2));
    return ExitCodes.succeeded;
  }
  if (page.length === 0) {
    if (afterSeq === 0 && !(await ledger.getRun(id))) throw new CliError(`the ledger here holds no run ${id}. Check the id (durable-harness list), or point --data or DATABASE_URL at the workers' ledger`, ExitCodes.usage);
    out(afterSeq === 0 ? `run ${escapeControl(id)} made no read through an MCP loopback recorded in this ledger` : 'no read on this page');
    return ExitCodes.succeeded;
  }
  for (const line of formatLoopbackTable(page)) out(line);
  if (nextAfter !== undefined) out(`more: ${commandLine(flags)('network', id, '--loopback', ...(flags.limit ? ['--limit', String(limit)] : []), ...(flags.data ? ['--data', flags.data] : []), '--after', String(nextAfter))}`);
  return ExitCodes.succeeded;
}

async function codecServerCommand(flags: Flags): Promise<ExitCode> {
  const codec = payloadCodecFromEnvironment();
  if (!codec) throw usageError('no payload keys: set DURABLE_HARNESS_PAYLOAD_KEYS (ID:BASE64KEY,...) or DURABLE_HARNESS_PAYLOAD_KEYS_FILE');
  const tokens = codecTokensFromEnvironment();
  const operators = operatorsFromEnvironment();
  requireCodecTokens(tokens, operators());
  const server = await startCodecServer({
    codec,
    tokens,
    operators,
    allowEncode: flags['allow-encode'] === true || process.env.DURABLE_HARNESS_CODEC_ALLOW_ENCODE === '1',
    host: process.env.DURABLE_HARNESS_CODEC_HOST ?? '127.0.0.1',
    port: Number(flags['codec-port'] ?? process.env.DURABLE_HARNESS_CODEC_PORT ?? 8234),
    corsOrigins: parseCorsOrigins(flags['cors-origin'] ?? (process.env.DURABLE_HARNESS_CODEC_CORS_ORIGINS ?? 'http://127.0.0.1:8233,http://localhost:8233').split(',')),
    log: err,
  });
  out(`codec server at ${server.url} (keys ${codec.keyIds.join(', ')}; new payloads use ${codec.currentKeyId}; tokens ${[...tokens.map((t) => t.name), ...operators().operators.filter((o) => o.roles.includes('read')).map((o) => `operator:${o.name}`)].join(', ')})`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await server.close();
  return ExitCodes.succeeded;
}

/** The exit code and message for anything `main` throws: every known error has its documented code. */
export function exitFor(e: unknown): { code: ExitCode; message: string } {
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof CliError) return { code: e.exitCode, message };
  if (
    e instanceof CatalogError ||
    e instanceof CatalogMismatchError ||
    e instanceof InvalidRunInputError ||
    e instanceof RunIdTakenError ||
    e instanceof PayloadKeyConfigError ||
    e instanceof CodecAuthConfigError ||
    e instanceof OperatorKeyError ||
    e instanceof OperatorConfigError ||
    e instanceof ObservabilityConfigError ||
    e instanceof LedgerConfigError ||
    // At a worker's start: the engine or the database it was configured with is not there (the message says how to fix it).
    e instanceof LedgerOpenError ||
    e instanceof DockerUnavailable ||
    e instanceof TemporalConfigError
  ) {
    return { code: ExitCodes.usage, message };
  }
  if (e instanceof WorkflowExecutionAlreadyStartedError) return { code: ExitCodes.usage, message: `a run with id ${e.workflowId} already exists; choose another --id` };
  if (e instanceof RunRejectedError) return { code: ExitCodes.rejected, message };
  return { code: ExitCodes.internal, message: e instanceof Error && e.stack ? e.stack : message };
}
