/**
 * docs/BENCHMARKS.md is written by the bench (`npm run bench -- --write-docs`): one section per bench part,
 * between `<!-- bench:NAME -->` markers, each with the machine it ran on. Running some parts replaces only
 * their sections; the rest of the page (hand-written text included) stays.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const benchmarksFile = path.join(import.meta.dirname, '..', 'docs', 'BENCHMARKS.md');

const preamble = `# Benchmarks

Written by \`npm run bench -- --write-docs\` (each section by its part of the bench; see bench/main.ts).
Figures are medians of interleaved runs on the machine named in each section; compare ratios and differences
measured in the same run, not absolute times across machines.
`;

/** Replaces (or appends) section `name` of the benchmarks page with `body`. */
export function writeSection(name: string, body: string, file = benchmarksFile): void {
  const open = `<!-- bench:${name} -->`;
  const close = `<!-- /bench:${name} -->`;
  const block = `${open}\n${body.trimEnd()}\n${close}`;
  let text = existsSync(file) ? readFileSync(file, 'utf8') : preamble;
  const start = text.indexOf(open);
  const end = text.indexOf(close);
  if (start !== -1 && end > start) text = text.slice(0, start) + block + text.slice(end + close.length);
  else text = `${text.trimEnd()}\n\n${block}\n`;
  writeFileSync(file, text.endsWith('\n') ? text : `${text}\n`);
}
