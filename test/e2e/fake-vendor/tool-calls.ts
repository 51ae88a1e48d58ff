/**
 * The scripted model's tool calls in each CLI's own tool vocabulary: a shell command and a file write, the two
 * things a permission gate must stop. Also which fake vendor each CLI talks to, and which of its requests are
 * turns (the rest — title and routing side calls — are answered by fallbacks without consuming the script).
 */
import path from 'node:path';
import { anthropicMessages } from './anthropic-messages.js';
import { gemini, geminiPrefix, geminiSideCallFallback, isGeminiTurnRequest } from './gemini.js';
import { isChatTurnRequest, openaiChat, openaiChatPrefix, openaiChatTitleFallback } from './openai-chat.js';
import { openaiResponses } from './openai-responses.js';
import { startFakeVendor, type FakeVendor, type RecordedRequest, type ScriptedReply, type ScriptedToolCall } from './server.js';

export type CliName = 'claude' | 'codex' | 'gemini' | 'opencode' | 'pi';
export const cliNames: readonly CliName[] = ['claude', 'codex', 'gemini', 'opencode', 'pi'];

/** A tool call asking to run `command` in the workspace. */
export function shellCall(cli: CliName, command: string, id?: string): ScriptedToolCall {
  const call = ((): Omit<ScriptedToolCall, 'id'> => {
    switch (cli) {
      case 'claude':
        return { name: 'Bash', input: { command, description: 'run a command' } };
      case 'codex':
        return { name: 'exec_command', input: { cmd: command } };
      case 'gemini':
        return { name: 'run_shell_command', input: { command } };
      case 'opencode':
        return { name: 'bash', input: { command, description: 'run a command' } };
      case 'pi':
        return { name: 'bash', input: { command } };
    }
  })();
  return id ? { ...call, id } : call;
}

/** A tool call asking to create `file` (relative to the workspace) with `content`. */
export function writeCall(cli: CliName, workspace: string, file: string, content: string, id?: string): ScriptedToolCall {
  const call = ((): Omit<ScriptedToolCall, 'id'> => {
    switch (cli) {
      case 'claude':
        return { name: 'Write', input: { file_path: path.join(workspace, file), content } };
      case 'codex':
        // apply_patch is a freeform tool in codex: the call carries the patch text itself.
        return { name: 'apply_patch', input: {}, freeform: `*** Begin Patch\n*** Add File: ${file}\n${content.split('\n').map((l) => `+${l}`).join('\n')}\n*** End Patch\n` };
      case 'gemini':
        return { name: 'write_file', input: { file_path: file, content } };
      case 'opencode':
        return { name: 'write', input: { filePath: path.join(workspace, file), content } };
      case 'pi':
        return { name: 'write', input: { path: file, content } };
    }
  })();
  return id ? { ...call, id } : call;
}

/** Only the CLI's turn requests consume scripted replies. */
export const turnRequest: Record<CliName, ((request: RecordedRequest) => boolean) | undefined> = {
  claude: undefined,
  codex: undefined,
  gemini: isGeminiTurnRequest,
  opencode: isChatTurnRequest,
  pi: isChatTurnRequest,
};

/** Scripted replies for `cli`, each consumed only by a turn request. */
export function forCli(cli: CliName, ...replies: ScriptedReply[]): ScriptedReply[] {
  const match = turnRequest[cli];
  return match ? replies.map((r) => ({ ...r, match })) : replies;
}

/** A fake vendor speaking `cli`'s API on 127.0.0.1. */
export function startVendorForCli(cli: CliName): Promise<FakeVendor> {
  switch (cli) {
    case 'claude':
      return startFakeVendor({ handlers: { '/v1/messages': anthropicMessages } });
    case 'codex':
      return startFakeVendor({ handlers: { '/v1/responses': openaiResponses } });
    case 'gemini':
      return startFakeVendor({ handlers: { [geminiPrefix]: gemini }, fallback: geminiSideCallFallback });
    case 'opencode':
    case 'pi':
      return startFakeVendor({ handlers: { [openaiChatPrefix]: openaiChat }, fallback: openaiChatTitleFallback });
  }
}

/** The base URL each adapter expects (Anthropic and Gemini without `/v1`). */
export function baseUrlFor(cli: CliName, vendor: FakeVendor): string {
  return cli === 'claude' || cli === 'gemini' ? vendor.url : `${vendor.url}/v1`;
}
