/**
 * `help COMMAND`, `COMMAND --help` and `completion bash|zsh`, all read from the one usage text of commands.ts: a
 * command's entry there is its help, and the names and flags it lists are what the shell completes — nothing to keep
 * in step by hand.
 */

import { readFileSync } from 'node:fs';
import { ExitCodes, type ExitCode } from './exit-codes.js';
import { usage } from './usage.js';

/** This package's version (its package.json, two levels up from src/cli or dist/cli). */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

/** What the command line answers without parsing a command or loading the SDK. */
export interface QuickAnswer {
  readonly code: ExitCode;
  readonly out?: string;
  readonly err?: string;
}

/**
 * `--version`, `help [COMMAND]`, `COMMAND --help`, `completion SHELL` and no command at all: answered from the
 * usage text alone (main.ts asks before it loads the rest). Undefined for everything else.
 */
export function quickAnswer(argv: readonly string[]): QuickAnswer | undefined {
  const [command, topic] = argv;
  const refused = (message: string, see = '--help'): QuickAnswer => ({ code: ExitCodes.usage, err: `durable-harness: ${message}\n  see: durable-harness ${see}` });
  if (argv.includes('--version') || argv.includes('-V')) return { code: ExitCodes.succeeded, out: `durable-harness ${packageVersion()}` };
  if (command === undefined) return { code: ExitCodes.usage, err: usage };
  const wantsHelp = command === 'help' || argv.includes('--help') || argv.includes('-h');
  if (wantsHelp) {
    // `help --help` is the help of help; `--help` alone, the whole usage.
    const of = command === 'help' ? (topic?.startsWith('-') ? 'help' : topic) : command.startsWith('-') ? undefined : command;
    if (of === undefined) return { code: ExitCodes.succeeded, out: usage };
    const help = commandHelp(usage, of);
    return help ? { code: ExitCodes.succeeded, out: help } : refused(`no command "${of}"; the commands: ${commandsOf(usage).join(', ')}`);
  }
  if (command === 'completion') {
    const script = completionScript(usage, topic ?? '');
    return script ? { code: ExitCodes.succeeded, out: script.trimEnd() } : refused('completion needs a shell: durable-harness completion bash (or zsh)', 'help completion');
  }
  return undefined;
}

/** A usage entry starts with this, two spaces in; its continuation lines are indented further. */
const ENTRY = /^ {2}durable-harness ([a-z][a-z-]*)/;

/** The commands the usage text lists, in its order, each once. */
export function commandsOf(usage: string): string[] {
  return [...new Set(usage.split('\n').flatMap((line) => ENTRY.exec(line)?.[1] ?? []))];
}

/** The usage entries of `command` (an entry with its continuation lines), or [] for a command the text does not list. */
function entriesOf(usage: string, command: string): string[] {
  const lines = usage.split('\n');
  const entries: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (ENTRY.exec(lines[i]!)?.[1] !== command) continue;
    const block = [lines[i]!];
    while (i + 1 < lines.length && /^ {3,}\S/.test(lines[i + 1]!) && !ENTRY.test(lines[i + 1]!)) block.push(lines[++i]!);
    entries.push(block.join('\n'));
  }
  return entries;
}

/** A paragraph of the usage text that starts with `heading` (up to the next blank line), or ''. */
function section(usage: string, heading: string): string {
  const at = usage.indexOf(`\n${heading}`);
  if (at < 0) return '';
  const end = usage.indexOf('\n\n', at + 1);
  return usage.slice(at + 1, end < 0 ? undefined : end);
}

/** The help of one command: its entries, the options every command takes, and where the rest is. */
export function commandHelp(usage: string, command: string): string | undefined {
  const entries = entriesOf(usage, command);
  if (entries.length === 0) return undefined;
  const common = section(usage, 'Common options');
  return `Usage:\n${entries.join('\n')}\n${common ? `\n${common}\n` : ''}\nEverything (exit codes, environment): durable-harness --help`;
}

/** Every `--flag` a command's entries name, then the common options'. */
function flagsOf(usage: string, command: string | undefined): string[] {
  const text = [...(command ? entriesOf(usage, command) : []), section(usage, 'Common options'), '--help --version --output'].join('\n');
  return [...new Set(text.match(/--[a-z][a-z-]*/g) ?? [])];
}

/**
 * A completion script: `eval "$(durable-harness completion bash)"` (in ~/.bashrc), or the same with `zsh` (through
 * zsh's bash completion layer). Completes command names, each command's flags, and file names elsewhere.
 */
export function completionScript(usage: string, shell: string): string | undefined {
  if (shell !== 'bash' && shell !== 'zsh') return undefined;
  const commands = [...new Set([...commandsOf(usage), 'help', 'completion'])];
  const cases = commandsOf(usage)
    .filter((command) => command !== 'help' && command !== 'completion')
    .map((command) => `    ${command}) flags='${flagsOf(usage, command).join(' ')}' ;;`)
    .join('\n');
  const bash = `_durable_harness() {
  local cur=\${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W '${commands.join(' ')}' -- "$cur"))
    return
  fi
  local flags
  case "\${COMP_WORDS[1]}" in
${cases}
    help) COMPREPLY=($(compgen -W '${commandsOf(usage).join(' ')}' -- "$cur")); return ;;
    completion) COMPREPLY=($(compgen -W 'bash zsh' -- "$cur")); return ;;
    *) flags='${flagsOf(usage, undefined).join(' ')}' ;;
  esac
  case "$cur" in
    -*) COMPREPLY=($(compgen -W "$flags" -- "$cur")) ;;
    *) COMPREPLY=($(compgen -f -- "$cur")) ;;
  esac
}
complete -F _durable_harness durable-harness`;
  const header = `# durable-harness completion (${shell}): eval "$(durable-harness completion ${shell})"`;
  return shell === 'zsh' ? `${header}\nautoload -U +X bashcompinit && bashcompinit\n${bash}\n` : `${header}\n${bash}\n`;
}
