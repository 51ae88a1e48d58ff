#!/usr/bin/env node
// MyCli: the made-up CLI of docs/harnesses.md's worked example. `my-cli --json [--resume ID]`, the prompt on stdin;
// one JSON object per line on stdout. It keeps its sessions and reads its config in $MYCLI_HOME (the driver's home).
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const home = process.env.MYCLI_HOME;
const args = process.argv.slice(2);
const resume = args.includes('--resume') ? args[args.indexOf('--resume') + 1] : undefined;
const config = JSON.parse(readFileSync(path.join(home, 'config.json'), 'utf8'));
const sessions = path.join(home, 'sessions');
mkdirSync(sessions, { recursive: true });

let prompt = '';
for await (const chunk of process.stdin) prompt += chunk;

let history = [];
if (resume !== undefined) {
  if (!existsSync(path.join(sessions, `${resume}.json`))) {
    process.stderr.write(`error: no such session ${resume}\n`);
    process.exit(1);
  }
  history = JSON.parse(readFileSync(path.join(sessions, `${resume}.json`), 'utf8'));
}
const id = resume ?? `s-${process.pid}`;
history.push(prompt);
writeFileSync(path.join(sessions, `${id}.json`), JSON.stringify(history));

const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
print({ type: 'session', id });
print({ type: 'text', text: `model ${config.model}, ${history.length} prompt(s) in this session` });
if (prompt === 'garble') process.stdout.write('not json\n');
print({ type: 'done', text: JSON.stringify({ next: 'success', result: history.join(' | ') }), input: 10 * prompt.length, output: 7 });
