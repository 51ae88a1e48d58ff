/**
 * Command-line conventions, without a server: `help COMMAND` and `COMMAND --help` print that command's usage,
 * `--version`, `--output json|table`, one-line usage errors that point at the help, and shell completion that a
 * real bash completes with (the script sourced, the completion function called as bash would).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { commandsOf, quickAnswer } from '../../src/cli/help.js';
import { usage } from '../../src/cli/usage.js';
import { runCli } from '../support/cli.js';
import { repoRoot } from '../support/worker.js';

const version = (JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;

describe('help', () => {
  it('help COMMAND and COMMAND --help print that command\'s entries and the common options, for every command', async () => {
    const commands = commandsOf(usage);
    expect(commands).toEqual(expect.arrayContaining(['dev', 'worker', 'run', 'status', 'logs', 'list', 'approve', 'deny', 'diff', 'help', 'completion']));
    for (const command of commands) {
      const viaHelp = await runCli(['help', command]);
      expect([viaHelp.code, viaHelp.stderr], command).toEqual([0, '']);
      expect(viaHelp.stdout, command).toMatch(new RegExp(`^Usage:\\n  durable-harness ${command}\\b`));
      expect(viaHelp.stdout).toContain('Common options (or environment):');
      expect(viaHelp.stdout).not.toContain('Exit codes:');
      expect((await runCli([command, '--help'])).stdout, command).toBe(viaHelp.stdout);
    }
    // approve's entry with its continuation line, and nothing of deny's.
    const approve = (await runCli(['help', 'approve'])).stdout;
    expect(approve).toContain("allow it (--edit: fields replacing the tool input's");
    expect(approve).not.toContain('durable-harness deny');
  });

  it('--help and help alone print the whole usage; no command prints it to stderr and exits 2', async () => {
    for (const args of [['--help'], ['-h'], ['help']]) {
      const r = await runCli(args);
      expect([r.code, r.stdout.trimEnd()]).toEqual([0, usage]);
    }
    const none = await runCli([]);
    expect([none.code, none.stdout, none.stderr.trimEnd()]).toEqual([2, '', usage]);
  });

  it('help of a command that does not exist names the commands, in one line and a pointer', async () => {
    const r = await runCli(['help', 'frobnicate']);
    expect(r.code).toBe(2);
    expect(r.stderr.trimEnd().split('\n')).toEqual([`durable-harness: no command "frobnicate"; the commands: ${commandsOf(usage).join(', ')}`, '  see: durable-harness --help']);
  });
});

describe('conventions', () => {
  it('--version (and -V) prints the package version', async () => {
    for (const flag of ['--version', '-V']) expect(await runCli([flag])).toMatchObject({ code: 0, stdout: `durable-harness ${version}\n`, stderr: '' });
  });

  it('a usage error is one line and the help that answers it, not the whole usage', async () => {
    const missing = await runCli(['run', 'scripted']);
    expect(missing.code).toBe(2);
    expect(missing.stderr.trimEnd().split('\n')).toEqual(['durable-harness: missing AGENT and TASK: durable-harness run AGENT TASK', '  see: durable-harness help run']);
    const flag = await runCli(['status', 'x', '--frobnicate']);
    expect(flag.code).toBe(2);
    expect(flag.stderr.trimEnd().split('\n')).toHaveLength(2);
    expect(flag.stderr).toMatch(/Unknown option '--frobnicate'[^]*see: durable-harness help status/);
    const unknown = await runCli(['frobnicate']);
    expect(unknown.stderr.trimEnd().split('\n')).toEqual(['durable-harness: unknown command "frobnicate"', '  see: durable-harness --help']);
  });

  it('--output takes json or table; table with --json is refused', async () => {
    const bad = await runCli(['list', '--output', 'yaml']);
    expect([bad.code, bad.stderr.split('\n')[0]]).toEqual([2, 'durable-harness: --output must be json or table, got "yaml"']);
    const both = await runCli(['list', '--output', 'table', '--json']);
    expect([both.code, both.stderr.split('\n')[0]]).toEqual([2, 'durable-harness: --output table and --json disagree: give one']);
  });

  it('the quick answers need no SDK: help, version and completion come from the usage text', () => {
    expect(quickAnswer(['--version'])).toEqual({ code: 0, out: `durable-harness ${version}` });
    expect(quickAnswer(['status', 'x'])).toBeUndefined();
    expect(quickAnswer(['completion'])).toMatchObject({ code: 2, err: expect.stringContaining('completion needs a shell') });
  });
});

describe('shell completion', () => {
  /** What bash completes for the words typed so far (the last one being completed), with the script sourced. */
  function complete(shell: 'bash', words: string[]): string[] {
    const script = quickAnswer(['completion', shell])!.out!;
    const line = `${script}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _durable_harness; printf '%s\\n' "\${COMPREPLY[@]}"`;
    return execFileSync('bash', ['-c', line], { encoding: 'utf8', cwd: repoRoot }).split('\n').filter(Boolean);
  }

  it('bash completes command names, a command\'s own flags and the common ones, and help topics', () => {
    expect(complete('bash', ['durable-harness', 'st'])).toEqual(['status']);
    expect(complete('bash', ['durable-harness', 'ap']).sort()).toEqual(['approvals', 'approve']);
    const approveFlags = complete('bash', ['durable-harness', 'approve', 'RUN', '--']);
    expect(approveFlags).toEqual(expect.arrayContaining(['--edit', '--scope', '--by', '--address', '--tls-ca-path', '--help']));
    expect(approveFlags).not.toContain('--refused');
    expect(complete('bash', ['durable-harness', 'network', 'RUN', '--re'])).toEqual(['--refused']);
    expect(complete('bash', ['durable-harness', 'help', 'di'])).toEqual(['diff']);
    expect(complete('bash', ['durable-harness', 'completion', ''])).toEqual(['bash', 'zsh']);
  });

  it('zsh gets the same function through bashcompinit; an unknown shell is refused', async () => {
    const zsh = (await runCli(['completion', 'zsh'])).stdout;
    expect(zsh).toContain('autoload -U +X bashcompinit && bashcompinit');
    expect(zsh).toContain('complete -F _durable_harness durable-harness');
    const fish = await runCli(['completion', 'fish']);
    expect([fish.code, fish.stderr.split('\n')[0]]).toEqual([2, 'durable-harness: completion needs a shell: durable-harness completion bash (or zsh)']);
  });
});
