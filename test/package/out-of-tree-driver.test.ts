/**
 * docs/harnesses.md's worked example, as a test. The driver (my-cli-driver.ts) is the doc's code block to the letter
 * and imports only `durable-harness/adapters`, as a driver outside this repository does; it is registered beside the
 * built-in drivers and run through the one turn engine (`runDriverTurn`) against a real process (my-cli.mjs).
 *
 * How `durable-harness/adapters` resolves here: vitest.config.ts aliases it to src/adapters/index.ts, and tsconfig.json
 * maps it there for the type check — the package's own entry (package.json "exports" → dist/adapters/index.js) as
 * source, so the test runs without a build. That dist/ carries the same entry is test/package/example-service.test.ts's
 * business (it installs the packed tarball).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import * as adapters from 'durable-harness/adapters';
import { builtinDrivers, collectTurn, driverRegistry, findDriver, LocalExecutor, LocalWorkspaceFs, runDriverTurn, type TurnRequest } from 'durable-harness/adapters';
import { myCli } from './my-cli-driver.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const doc = readFileSync(path.join(repo, 'docs', 'harnesses.md'), 'utf8');
const workspace = mkdtempSync(path.join(os.tmpdir(), 'out-of-tree-'));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));

const registry = driverRegistry([...builtinDrivers, myCli]);

function turn(prompt: string, extra: Partial<TurnRequest> = {}) {
  const request: TurnRequest = {
    runId: 'run-1', harnessName: 'mycli', executable: process.execPath, baseArgs: [path.join(here, 'my-cli.mjs')], model: 'acme-1',
    workspacePath: workspace, env: {}, timeoutMs: 20_000, prompt, turn: 1, ...extra,
  };
  return collectTurn(runDriverTurn(findDriver(registry, 'MyCli'), request, { executor: new LocalExecutor({ workspacePath: workspace }), fs: new LocalWorkspaceFs(workspace) }));
}

describe('an out-of-tree driver (docs/harnesses.md)', () => {
  it('is the code the doc shows, importing only durable-harness/adapters', () => {
    const source = readFileSync(path.join(here, 'my-cli-driver.ts'), 'utf8');
    const block = /<!-- worked-example: test\/package\/my-cli-driver\.ts -->\n```ts\n([\s\S]*?)```\n/.exec(doc);
    expect(block?.[1]).toBe(source);
    const imported = [...source.matchAll(/^import .* from '([^']+)';$/gm)].map((m) => m[1]);
    expect(imported).toEqual(['durable-harness/adapters']);
  });

  it('every helper the doc lists is exported by durable-harness/adapters', () => {
    const table = doc.slice(doc.indexOf('The helpers, all exported by `durable-harness/adapters`'));
    const helpers = [...table.slice(0, table.indexOf('\n\n', table.indexOf('| helper |'))).matchAll(/^\| (`[^|]+`) \|/gm)].flatMap((m) => [...m[1]!.matchAll(/`(\w+)`/g)].map((n) => n[1]!));
    expect(helpers.length).toBeGreaterThan(15);
    expect(helpers.filter((name) => !(name in adapters))).toEqual([]);
  });

  it("the doc counts the record's fields as HarnessDriver declares them", () => {
    const contract = readFileSync(path.join(repo, 'src', 'adapters', 'driver.ts'), 'utf8');
    const body = /export interface HarnessDriver \{([\s\S]*?)\n\}/.exec(contract)![1]!;
    const fields = [...body.matchAll(/^ {2}(?:readonly )?(\w+)\??[:(]/gm)].map((m) => m[1]);
    expect(fields).toEqual(['specificationVersion', 'driverClass', 'capabilities', 'vendor', 'mcp', 'permissions', 'homeTemplate', 'prepare', 'command', 'session']);
    expect(doc).toContain(`the record's ${fields.length} fields`);
    const rows = doc.slice(doc.indexOf(`the record's ${fields.length} fields`)).split('\n\n')[1]!;
    expect([...rows.matchAll(/^\| `(\w+)/gm)].map((m) => m[1])).toEqual(fields);
  });

  it('registers beside the built-in drivers', () => {
    expect(findDriver(registry, 'MyCli')).toBe(myCli);
    expect([...registry.keys()]).toEqual([...builtinDrivers.map((d) => d.driverClass), 'MyCli']);
  });

  it('runs a turn through the engine: its home written by prepare, text, usage, the session in the result', async () => {
    const result = await turn('hello');
    expect(result.error).toBeUndefined();
    expect(JSON.parse(result.text!)).toEqual({ next: 'success', result: 'hello' });
    expect(result.sessionId).toMatch(/^s-\d+$/);
    expect(result.resumed).toBe(false);
    expect(result.usage).toMatchObject({ input: 50, output: 7 });
    expect(result.usageEvents).toBe(1);
    // The model reached the CLI through the config prepare wrote into its home, not through argv.
    expect(JSON.parse(readFileSync(path.join(workspace, '.home', 'mycli', 'config.json'), 'utf8'))).toEqual({ model: 'acme-1', baseUrl: null });
  });

  it('resumes the session the CLI reported; a line it does not know does not break the turn', async () => {
    const first = await turn('one');
    const second = await turn('garble', { resumeSessionId: first.sessionId, turn: 2 });
    expect(second.error).toBeUndefined();
    expect(second.sessionId).toBe(first.sessionId);
    expect(second.resumed).toBe(true);
    expect(JSON.parse(second.text!)).toEqual({ next: 'success', result: 'one | garble' });
  });

  it('a session the CLI no longer knows ends as resume-failed, naming it', async () => {
    const result = await turn('again', { resumeSessionId: 's-gone', turn: 2 });
    expect(result.text).toBeUndefined();
    expect(result.error).toMatchObject({ code: 'resume-failed', exitCode: 1 });
    expect(result.error!.message).toMatch(/^MyCli no longer knows session s-gone; start a fresh session/);
  });
});
