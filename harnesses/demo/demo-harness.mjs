#!/usr/bin/env node
// A demo harness that speaks stdio-JSON (docs/stdio-json.md). No network, no key, no dependencies.
// It behaves like a tiny agent: it looks at the workspace, asks the runtime to write NOTES.md, then
// reports success. Sessions persist in <workspace>/.demo-harness/sessions/<id>.json so turns can resume.
import { randomUUID } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';

const feedbackMarker = 'Your last reply was not a valid envelope';

function emit(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

function finish(line) {
  // Exit once the terminal line is flushed; stdin stays open on the runtime's side.
  process.stdout.write(`${JSON.stringify(line)}\n`, () => process.exit(0));
}

const tokens = (text) => Math.ceil(text.length / 4);

async function readRequest() {
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    if (line.trim() === '') continue;
    rl.close();
    return JSON.parse(line);
  }
  throw new Error('no request line on stdin');
}

function sessionFile(workspace, id) {
  return path.join(workspace, '.demo-harness', 'sessions', `${id}.json`);
}

function loadSession(workspace, id) {
  if (!/^[A-Za-z0-9-]+$/.test(id)) return undefined;
  try {
    return JSON.parse(readFileSync(sessionFile(workspace, id), 'utf8'));
  } catch {
    return undefined;
  }
}

function saveSession(workspace, session) {
  const file = sessionFile(workspace, session.id);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(session, null, 2));
}

/** Lists visible top-level files and reads the small ones, reporting each as an activity. */
function surveyWorkspace(workspace) {
  emit({ type: 'activity', description: 'list .' });
  const files = readdirSync(workspace)
    .filter((name) => !name.startsWith('.'))
    .filter((name) => statSync(path.join(workspace, name)).isFile())
    .sort();
  const seen = [];
  for (const name of files.slice(0, 5)) {
    const text = readFileSync(path.join(workspace, name), 'utf8');
    emit({ type: 'activity', description: `read ${name}` });
    seen.push({ name, firstLine: text.split('\n').find((l) => l.trim() !== '') ?? '' });
  }
  return { files, seen };
}

function taskSummary(prompt) {
  const first = prompt.split('\n').find((l) => l.trim() !== '') ?? '(no task)';
  return first.length > 200 ? `${first.slice(0, 200)}…` : first;
}

function notesFor(task, survey) {
  const lines = ['# Notes', '', `Task: ${task}`, '', `Files in the workspace (${survey.files.length}):`];
  for (const file of survey.files) lines.push(`- ${file}`);
  for (const { name, firstLine } of survey.seen) lines.push('', `${name} starts with: ${firstLine}`);
  return `${lines.join('\n')}\n`;
}

/** Decides the next step from the session's phase. */
function nextStep(session, request) {
  if (session.phase === 'new') {
    const survey = surveyWorkspace(request.workspace);
    session.task = taskSummary(request.prompt);
    session.phase = 'asked-write';
    return {
      step: 'actions',
      actions: [{ name: 'write_file', params: { path: 'NOTES.md', content: notesFor(session.task, survey) } }],
      message: `I looked at ${survey.files.length} file(s); writing NOTES.md with a summary.`,
    };
  }
  if (session.phase === 'asked-write' && request.prompt.includes(feedbackMarker)) {
    // The runtime did not understand the last reply; repeat the request as a clean envelope.
    return { step: 'actions', actions: session.lastActions ?? [], message: 'Repeating my request.' };
  }
  session.phase = 'done';
  return { step: 'success', result: `Wrote NOTES.md summarising the task "${session.task}" and the workspace files.` };
}

async function main() {
  const request = await readRequest();
  const model = request.model ?? 'demo-1';
  let session;
  if (request.sessionId) {
    session = loadSession(request.workspace, request.sessionId);
    if (!session) {
      finish({ type: 'error', code: 'resume-failed', message: `demo harness has no session ${request.sessionId}` });
      return;
    }
  } else {
    session = { id: randomUUID(), phase: 'new', contextChars: 0, turns: 0 };
  }
  const resumed = Boolean(request.sessionId);
  emit({ type: 'session', id: session.id, resumed, model });

  const step = nextStep(session, request);
  if (step.step === 'actions' && step.actions.length > 0) session.lastActions = step.actions;
  const envelope = JSON.stringify(step, null, 2);
  const text = `Here is my next step.\n\n\`\`\`json\n${envelope}\n\`\`\`\n`;
  const cacheRead = Math.ceil(session.contextChars / 4); // the resumed context, as if served from cache
  const promptChars = request.prompt.length + (request.systemPrompt ?? '').length;
  emit({ type: 'usage', input: tokens(request.prompt) + tokens(request.systemPrompt ?? ''), output: tokens(text), cacheRead, cacheWrite: 0 });

  session.contextChars += promptChars + text.length;
  session.turns += 1;
  saveSession(request.workspace, session); // before the terminal line, so the next turn can resume
  finish({ type: 'complete', text });
}

main().catch((error) => {
  process.stderr.write(`demo harness failed: ${error?.stack ?? error}\n`);
  process.exit(1);
});
