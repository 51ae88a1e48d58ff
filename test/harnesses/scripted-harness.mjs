#!/usr/bin/env node
// Scripted stdio-JSON harness for tests: replays DIR/NAME.json one step per turn.
//
//   node scripted-harness.mjs --scripts DIR [--stateless] [--input-from-prompt]
//
// --stateless: a harness without session resume. It ignores any sessionId, starts a new session every turn and
// finds its place in the script by counting the earlier replies in the prompt (the runtime replays the
// conversation to such a harness).
//
// Every turn's request is kept in <workspace>/.scripted/last-request.json (for tests of what the runtime sends).
// Turn 1: the prompt contains `script:NAME`; a new session is stored in <workspace>/.scripted/sessions/<id>.json.
// Later turns resume by the request's sessionId; with `fork: true` in the request they continue a COPY of it under a
// new id (the original stays as it was). Like a real CLI, every prompt is appended to the session's `prompts` as soon
// as the turn starts, so a failed attempt that resumed in place leaves its prompt behind.
// Unknown session and no `script:` → an error line.
// Script file: { "turns": [step, ...] }. A step's fields are applied in THIS order:
//   failUntilAttempt N  exit 1 ("transient failure") until the Nth run of this step: runs 1..N-1 fail, run N goes on
//   failTimes K         fail the first K runs of this step the same way (for operator-retry tests)
//   model               reported in the session line (printed next, for every turn)
//   activity            an activity line
//   usage               a usage line ({input, output, cacheRead, cacheWrite, reasoning, costUsd})
//   calls               [{usage, sleepMs, exit, unread, report}] model calls: each sleeps, then is "served" (appended to
//                       .scripted/served.jsonl, the vendor's bill) and reported as a usage line; `exit: N` exits right
//                       after that call without a terminal line (a crash after a good call); `unread: true` serves it
//                       but its line never reaches the runtime, as when the worker dies just then (then exits 1);
//                       `report: "<line>"` prints that raw line instead of the usage line (a harness that lies: NaN…)
// With the request's `attempt`, served calls stay in .scripted/unacked.json until the runtime's `usage-ack`; the
// next process re-reports what is left first (exactly-once usage across worker crashes).
//   ignoreTerm          from here on ignores SIGTERM and a closed stdin: a harness that will not stop by itself
//   hangOnce MS         the first run of this step sleeps MS after its calls (a turn that hangs once, then behaves);
//                       with `hangOnceFlag: PATH` "first" is per machine (the file PATH), not per workspace
//   sleepMs             writes .scripted/sleeping.pid (own pid) and .scripted/child.pid (a grandchild `sleep`),
//                       then prints activity "sleeping" and sleeps — for cancel/timeout tests
//   echoEnv             prints a text line "NAME=value" with that environment variable's value
//   leak                NAME: puts that variable's value in every field it reports — the session line's model,
//                       an activity, a text line, a usage line (as an extra field and a field name), an unknown
//                       line type, stderr, and `.leak/value.txt` in the workspace; with `leakSession` also the
//                       session id (the session is then stored under that id too, so resuming it still works).
//                       failTimes/failUntilAttempt then apply after the leak, with the value in the stderr
//   escape              starts three `sleep`s that leave the harness's process group — `setsid`, a Node
//                       `detached: true` spawn and a double fork — and writes their pids to .scripted/escapees.json
//                       (after its own to .scripted/harness.pid)
//   symlinks            {name: target}: (re)creates these symbolic links in the workspace
//   writeFiles          {path: text}: writes these files in the workspace (following nothing special)
//   executables         [path]: makes these files (written by writeFiles) executable (a planted hook)
//   permissions         [{tool, input, kind?, title?, editable?}]: for each, a permission line (id p1, p2 ...), then
//                       waits for its permission-response; allowed: runs it (input.command with /bin/sh -c, or writes
//                       input.content to input.path; the response's input instead when editable) and prints a
//                       text line "permission p1: allowed"; denied: "permission p1: denied MESSAGE".
//                       ${env:NAME} is substituted in every string of tool, input and title.
//   permissionFlood     {count, tool, distinct, crashAfter}: prints `count` permission lines at once (ids f1, f2 …, tool
//                       default "lookup", kind other, input {n: i % distinct}), then reads every answer and appends
//                       {allowed, denied, messages: {text: count}} to .scripted/flood.jsonl; prints a text line
//                       "flood: A allowed, D denied". crashAfter N: the first run of this step exits 1 after N answers
//                       (an attempt lost mid-flood)
//   outputFlood         a hostile stdout, written in 64 KiB chunks as the pipe takes them (never built in memory):
//                       {line: BYTES, newline}: one text line of BYTES bytes ('x'), ended by a newline unless
//                       newline is false (then the process exits 0 right after it: the line ends at end of output);
//                       {tinyLines: N}: N lines "x"; {junkLines: N}: N lines "j<i mod 10>" (not JSON);
//                       {kbLines: BYTES}: BYTES of 1 KiB activity lines. Writes .scripted/flood-started first
//   crash               {exitCode, stderr}: prints stderr and exits with no terminal line
//   error               {message, code}: terminal error line
//   raw                 string printed as the complete text (malformed envelopes); ${env:NAME} is substituted
//   envelope            object printed as JSON as the complete text
//   padBytes N          with `envelope`: the text is the envelope preceded by N bytes of prose (large replies)
//   reportSessionChars N  with `raw`/`envelope`: the complete line reports a session id of N characters (not stored)
// `${env:NAME}` in crash.stderr, error.message, raw, envelope and permissions stands for that variable's value
// (`${env:NAME:json-u}`: spelled as JSON \u escapes, which the runtime's envelope parsing decodes; `${env:NAME:zwsp}`:
// with a zero-width space in its middle).
// A step with none of crash/error/raw/envelope exits 0 without a terminal line.
// Run counters live in .scripted/counters/<script>.<step>.<kind> so they survive a failed first turn.
// Past the last step → error line "script exhausted".
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { appendFileSync, chmodSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';

const scriptsDir = process.argv[process.argv.indexOf('--scripts') + 1];
const stateless = process.argv.includes('--stateless');
// --input-from-prompt: a step's usage line bills its input as the request's size (~4 characters a token), as a model would.
const inputFromPrompt = process.argv.includes('--input-from-prompt');

// Like the real CLIs, SIGTERM ends the process — also as PID 1 of the local sandbox's PID namespace, where the
// kernel ignores signals a process installed no handler for (the runtime's stop would wait its kill grace).
process.on('SIGTERM', () => process.exit(143));

const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const finish = (line) => process.stdout.write(`${JSON.stringify(line)}\n`, () => process.exit(0));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Reads stdin as lines for the whole process: the first is the turn request; later ones are the runtime's
 * `usage-ack` lines (kept in `acked`) and permission answers (read with `nextLine`). When stdin closes the runtime
 * is gone: stop, serve nothing more.
 */
let runtimeGone = false;
const acked = [];
let onAck;
const queued = [];
let waiting;
const stdinLines = createInterface({ input: process.stdin });
stdinLines.on('line', (line) => {
  if (line.trim() === '') return;
  const value = JSON.parse(line);
  if (value.type === 'usage-ack') {
    acked.push(value);
    onAck?.(value);
  } else if (waiting) {
    const resolve = waiting;
    waiting = undefined;
    resolve(value);
  } else queued.push(value);
});
stdinLines.on('close', () => {
  runtimeGone = true;
  const resolve = waiting;
  waiting = undefined;
  resolve?.(undefined);
});

/** The next non-empty stdin line as JSON (acknowledgements aside); `undefined` once stdin is closed. */
function nextLine() {
  if (queued.length > 0) return Promise.resolve(queued.shift());
  if (runtimeGone) return Promise.resolve(undefined);
  return new Promise((resolve) => (waiting = resolve));
}

async function readRequest() {
  const request = await nextLine();
  if (!request) throw new Error('no request line on stdin');
  return request;
}

/** Asks for each tool use and does what an allowing answer says, like a harness with real tools. */
async function askPermissions(asks, workspace) {
  for (const [i, asked] of asks.entries()) {
    const id = `p${i + 1}`;
    const ask = substituteDeep(asked);
    emit({ type: 'permission', id, tool: ask.tool, input: ask.input, ...(ask.kind ? { kind: ask.kind } : {}), ...(ask.title ? { title: ask.title } : {}), ...(ask.editable ? { editable: true } : {}) });
    let answer;
    do answer = await nextLine();
    while (answer && !(answer.type === 'permission-response' && answer.id === id));
    if (!answer?.allow) {
      emit({ type: 'text', text: `permission ${id}: denied ${answer?.message ?? '(no answer)'}` });
      continue;
    }
    const input = ask.editable && answer.input ? answer.input : ask.input;
    if (typeof input.command === 'string') spawnSync('/bin/sh', ['-c', input.command], { cwd: workspace, stdio: 'ignore' });
    else if (typeof input.path === 'string') writeFile(path.join(workspace, input.path), String(input.content ?? ''));
    emit({ type: 'text', text: `permission ${id}: allowed` });
  }
}

/** Asks `count` permissions at once (a flooding harness), then collects the answers. */
async function floodPermissions(flood, dir, session) {
  const count = flood.count;
  const distinct = flood.distinct ?? count;
  const crashAfter = flood.crashAfter !== undefined && shouldFail(dir, session, 'flood', 1) ? flood.crashAfter : undefined;
  const lines = [];
  for (let i = 1; i <= count; i++) lines.push(JSON.stringify({ type: 'permission', id: `f${i}`, tool: flood.tool ?? 'lookup', kind: 'other', input: { n: i % distinct } }));
  process.stdout.write(`${lines.join('\n')}\n`);
  const result = { allowed: 0, denied: 0, messages: {} };
  for (let answered = 0; answered < count; ) {
    const answer = await nextLine();
    if (!answer) break;
    if (answer.type !== 'permission-response') continue;
    answered += 1;
    if (answer.allow) result.allowed += 1;
    else {
      result.denied += 1;
      result.messages[answer.message] = (result.messages[answer.message] ?? 0) + 1;
    }
    if (answered === crashAfter) {
      process.stderr.write(`lost after ${answered} answers\n`);
      process.exit(1);
    }
  }
  appendFileSync(path.join(dir, 'flood.jsonl'), `${JSON.stringify(result)}\n`);
  emit({ type: 'text', text: `flood: ${result.allowed} allowed, ${result.denied} denied` });
}

/** Writes `total` bytes made of `unit` repeated, in chunks of about 64 KiB, each once the pipe took the last. */
async function writeRepeated(unit, total) {
  const perChunk = Math.max(1, Math.floor((64 * 1024) / unit.length));
  const chunk = Buffer.from(unit.repeat(perChunk));
  let left = total;
  while (left > 0) {
    const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
    await new Promise((resolve) => process.stdout.write(piece, resolve));
    left -= piece.length;
  }
}

/** A flooding harness's stdout (see `outputFlood` above). */
async function floodOutput(flood, dir) {
  writeFile(path.join(dir, 'flood-started'), String(Date.now()));
  if (flood.line !== undefined) {
    await writeRepeated('x', flood.line);
    if (flood.newline === false) await new Promise(() => process.stdout.write('', () => process.exit(0)));
    else await new Promise((resolve) => process.stdout.write('\n', resolve));
  }
  if (flood.tinyLines !== undefined) await writeRepeated('x\n', flood.tinyLines * 2);
  if (flood.junkLines !== undefined) await writeRepeated('j0\nj1\nj2\nj3\nj4\nj5\nj6\nj7\nj8\nj9\n', flood.junkLines * 3);
  if (flood.kbLines !== undefined) {
    const line = `${JSON.stringify({ type: 'activity', description: 'k'.repeat(1024 - 39) })}\n`;
    await writeRepeated(line, Math.floor(flood.kbLines / line.length) * line.length);
  }
}

function writeFile(file, text) {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
}

function readJson(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Counts runs of one step; returns true if this run should fail (the first `failing` runs do). */
/** True the first time for `file` (an absolute path: once per machine, whatever workspace the step runs in). */
function firstTime(file) {
  try {
    writeFileSync(file, String(process.pid), { flag: 'wx' });
    return true;
  } catch {
    return false;
  }
}

function shouldFail(dir, session, kind, failing) {
  const file = path.join(dir, 'counters', `${session.script}.${session.position}.${kind}`);
  const runsBefore = Number(readJson(file) ?? 0);
  writeFile(file, String(runsBefore + 1));
  return runsBefore < failing;
}

function openSession(dir, request) {
  if (stateless) {
    const name = /script:([A-Za-z0-9_.-]+)/.exec(request.prompt)?.[1];
    if (!name) return { error: 'no script:NAME in the prompt (a stateless harness needs the conversation replayed)' };
    // Turns before this one: the replayed replies, plus the turns a bounded replay summarised instead.
    const digested = Number(/\((\d+) turns?\) are summarised below/.exec(request.prompt)?.[1] ?? 0);
    return { session: { id: randomUUID(), script: name, position: request.prompt.split('</assistant>').length - 1 + digested }, resumed: false };
  }
  const known = request.sessionId ? readJson(path.join(dir, 'sessions', `${path.basename(request.sessionId)}.json`)) : undefined;
  if (known && request.fork) return { session: { ...known, id: randomUUID(), forkedFrom: known.id }, resumed: true };
  if (known) return { session: known, resumed: true };
  // Like a real CLI: asked to resume a session it does not know, it refuses rather than starting fresh.
  if (request.sessionId) return { error: `unknown session ${request.sessionId}` };
  const name = /script:([A-Za-z0-9_.-]+)/.exec(request.prompt)?.[1];
  if (!name) return { error: request.sessionId ? `unknown session ${request.sessionId}` : 'no script:NAME in the prompt and no session to resume' };
  return { session: { id: randomUUID(), script: name, position: 0, prompts: [] }, resumed: false };
}

function startSleeper(dir, ms) {
  writeFile(path.join(dir, 'sleeping.pid'), String(process.pid));
  const child = spawn('sleep', [String(Math.ceil(ms / 1000) + 1)], { stdio: 'ignore' });
  writeFile(path.join(dir, 'child.pid'), String(child.pid));
  // Announce only once both pids are on disk, so a test that kills on this line can check them.
  emit({ type: 'activity', description: 'sleeping' });
  return sleep(ms);
}

/**
 * Exactly-once usage: every call served is kept in .scripted/unacked.json until the runtime acknowledges it; the
 * next process re-reports what is left (with its attempt, turn and call), which the runtime books idempotently.
 */
function unackedStore(dir, request) {
  const file = path.join(dir, 'unacked.json');
  const entries = readJson(file) ?? {};
  const save = () => writeFile(file, JSON.stringify(entries));
  const forget = (ack) => {
    if (delete entries[`${ack.attempt}#${ack.call}`]) save();
  };
  onAck = forget;
  for (const ack of acked) forget(ack);
  return {
    /** Calls of earlier attempts nobody acknowledged. */
    pending: () => Object.values(entries).filter((e) => e.attempt !== request.attempt),
    add: (entry) => {
      entries[`${entry.attempt}#${entry.call}`] = entry;
      save();
    },
  };
}

/** `${env:NAME}` → the value; `${env:NAME:json-u}` → every character as a JSON `\uXXXX` escape; `${env:NAME:zwsp}` → a U+200B in its middle. */
const spell = {
  'json-u': (value) => [...value].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join(''),
  zwsp: (value) => `${value.slice(0, value.length >> 1)}\u200b${value.slice(value.length >> 1)}`,
};
const substitute = (text) => text.replace(/\$\{env:([A-Z0-9_]+)(?::(json-u|zwsp))?\}/g, (_, name, form) => (form ? spell[form] : (v) => v)(process.env[name] ?? ''));
const substituteDeep = (value) =>
  typeof value === 'string'
    ? substitute(value)
    : Array.isArray(value)
      ? value.map(substituteDeep)
      : value && typeof value === 'object'
        ? Object.fromEntries(Object.entries(value).map(([k, v]) => [substitute(k), substituteDeep(v)]))
        : value;

/** Children that leave the process group: setsid, a detached spawn, a double fork. Returns their pids. */
function startEscapees() {
  const setsid = Number(execFileSync('/bin/sh', ['-c', 'setsid sleep 301 >/dev/null 2>&1 & echo $!'], { encoding: 'utf8' }).trim());
  const detached = spawn('sleep', ['302'], { detached: true, stdio: 'ignore' });
  detached.unref();
  const doubleFork = Number(execFileSync('/bin/sh', ['-c', '(sleep 303 >/dev/null 2>&1 & echo $!)'], { encoding: 'utf8' }).trim());
  return [setsid, detached.pid, doubleFork];
}

function leakEverything(key, workspace) {
  emit({ type: 'activity', description: `reading ${key}` });
  emit({ type: 'text', text: `the key is ${key}` });
  emit({ type: 'usage', input: 1, output: 1, raw: { note: key, [key]: 1 } });
  emit({ type: `mystery-${key}`, payload: key, nested: [{ [key]: key }] });
  process.stderr.write(`stderr says ${key}\n`);
  writeFile(path.join(workspace, '.leak', 'value.txt'), key);
}

async function main() {
  const request = await readRequest();
  const dir = path.join(request.workspace, '.scripted');
  writeFile(path.join(dir, 'last-request.json'), JSON.stringify(request));
  const unacked = request.attempt ? unackedStore(dir, request) : undefined;
  for (const entry of unacked?.pending() ?? []) emit({ type: 'usage', ...entry.usage, attempt: entry.attempt, turn: entry.turn, call: entry.call });
  const opened = openSession(dir, request);
  if (opened.error) return finish({ type: 'error', code: request.sessionId ? 'resume-failed' : 'protocol-error', message: opened.error });
  const { session, resumed } = opened;
  const script = JSON.parse(readFileSync(path.join(scriptsDir, `${session.script}.json`), 'utf8'));
  const step = script.turns[session.position];
  const save = () => writeFile(path.join(dir, 'sessions', `${session.id}.json`), JSON.stringify(session));
  // The prompt enters the session at once, as a CLI writes the user message before calling the model.
  session.prompts = [...(session.prompts ?? []), request.prompt];
  save();
  if (!step) {
    save();
    emit({ type: 'session', id: session.id, resumed, model: request.model ?? 'scripted' });
    return finish({ type: 'error', code: 'protocol-error', message: `script exhausted: ${session.script} has ${script.turns.length} turn(s)` });
  }
  const key = step.leak ? (process.env[step.leak] ?? '') : undefined;
  const failNow = () =>
    (step.failUntilAttempt && shouldFail(dir, session, 'attempts', step.failUntilAttempt - 1)) ||
    (step.failTimes && shouldFail(dir, session, 'failures', step.failTimes));
  // A leaking step leaks first, then fails (with the key in its stderr): the failure paths carry it too.
  if (key === undefined && failNow()) {
    process.stderr.write('transient failure\n');
    process.exit(1);
  }
  if (key !== undefined && step.leakSession) {
    // Report the key as the session id, and keep the session findable under it.
    session.id = `sess-${key}`;
  }
  emit({ type: 'session', id: session.id, resumed, model: key !== undefined ? `model-${key}` : (step.model ?? request.model ?? 'scripted') });
  if (key !== undefined) {
    leakEverything(key, request.workspace);
    if (failNow()) {
      process.stderr.write(`transient failure ${key}\n`);
      process.exit(1);
    }
  }
  for (const [name, target] of Object.entries(step.symlinks ?? {})) {
    rmSync(path.join(request.workspace, name), { recursive: true, force: true });
    symlinkSync(target, path.join(request.workspace, name));
  }
  for (const [name, text] of Object.entries(step.writeFiles ?? {})) writeFile(path.join(request.workspace, name), substitute(text));
  for (const name of step.executables ?? []) chmodSync(path.join(request.workspace, name), 0o755);
  if (step.escape) {
    writeFile(path.join(dir, 'harness.pid'), String(process.pid));
    writeFile(path.join(dir, 'escapees.json'), JSON.stringify(startEscapees()));
    emit({ type: 'activity', description: 'escapees started' });
  }
  if (step.ignoreTerm) {
    process.removeAllListeners('SIGTERM');
    process.on('SIGTERM', () => undefined);
  }
  if (step.activity) emit({ type: 'activity', description: step.activity });
  if (step.usage) emit({ type: 'usage', ...step.usage, ...(inputFromPrompt ? { input: Math.ceil((request.prompt.length + (request.systemPrompt ?? '').length) / 4) } : {}) });
  let served = 0;
  for (const call of step.calls ?? []) {
    if (call.sleepMs) await sleep(call.sleepMs);
    // A model call whose runtime died meanwhile is never made (a CLI killed with its worker).
    if (runtimeGone && !step.ignoreTerm) process.exit(0);
    served += 1;
    unacked?.add({ attempt: request.attempt, turn: request.turn, call: served, usage: call.usage });
    appendFileSync(path.join(dir, 'served.jsonl'), `${JSON.stringify({ session: session.id, turn: request.turn, usage: call.usage })}\n`);
    if (call.unread) process.exit(1);
    if (call.report !== undefined) process.stdout.write(`${call.report}\n`);
    else emit({ type: 'usage', ...call.usage, ...(unacked ? { call: served } : {}) });
    if (call.exit !== undefined) {
      process.stderr.write('crashed after a model call\n');
      process.stdout.write('', () => process.exit(call.exit));
      return;
    }
  }
  if (step.hangOnce && (step.hangOnceFlag ? firstTime(step.hangOnceFlag) : shouldFail(dir, session, 'hangs', 1))) await sleep(step.hangOnce);
  if (step.sleepMs) await startSleeper(dir, step.sleepMs);
  if (step.echoEnv) emit({ type: 'text', text: `${step.echoEnv}=${process.env[step.echoEnv] ?? ''}` });
  // Everything the harness process was given, for a test to search: its whole environment, into a workspace file.
  if (step.dumpEnv) writeFile(path.join(request.workspace, step.dumpEnv), JSON.stringify({ env: process.env, argv: process.argv }));
  if (step.permissions) await askPermissions(step.permissions, request.workspace);
  if (step.permissionFlood) await floodPermissions(step.permissionFlood, dir, session);
  if (step.outputFlood) await floodOutput(step.outputFlood, dir);
  session.position += 1;
  save(); // before any terminal line, so the next turn resumes after this step
  if (step.crash) {
    process.stderr.write(substitute(step.crash.stderr ?? ''));
    process.exit(step.crash.exitCode ?? 1);
  }
  if (step.error) return finish({ type: 'error', message: substitute(step.error.message), code: step.error.code ?? 'vendor-error' });
  const extra = key !== undefined ? { sessionId: session.id, model: `model-${key}` } : step.reportSessionChars ? { sessionId: 'S'.repeat(step.reportSessionChars) } : {};
  if (step.raw !== undefined) return finish({ type: 'complete', text: substitute(step.raw), ...extra });
  if (step.envelope !== undefined) {
    const pad = step.padBytes ? `${'Lorem ipsum dolor sit amet. '.repeat(Math.ceil(step.padBytes / 28)).slice(0, step.padBytes)}\n` : '';
    return finish({ type: 'complete', text: pad + substitute(JSON.stringify(step.envelope)), ...extra });
  }
  process.exit(0);
}

main().catch((error) => {
  process.stderr.write(`scripted harness failed: ${error?.stack ?? error}\n`);
  process.exit(2);
});
