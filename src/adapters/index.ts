/** Harness adapters: the contract, the CLI base class, the stdio-JSON adapter and the registry. */
export * from './types.js';
export { CliHarnessAdapter } from './cli-adapter.js';
export type { LineState, TurnCommand, TurnContext } from './cli-adapter.js';
export { collectTurn, foldTurn } from './fold.js';
export type { TurnResult } from './fold.js';
export { StdioJsonAdapter, stdioJsonCapabilities, stdioJsonDriverClass } from './stdio-json-adapter.js';
export type { StdioJsonAdapterOptions } from './stdio-json-adapter.js';
export * as stdioJsonProtocol from './stdio-json-protocol.js';
export { AdapterRegistry, UnknownDriverError, defaultAdapterRegistry } from './registry.js';
export { ClaudeCode, claudeCodeDriverClass, registerClaudeCode } from './claude-code-adapter.js';
export { Codex, codexDriverClass, registerCodex } from './codex-adapter.js';
export { GeminiCliAdapter, geminiCliDriverClass, registerGeminiCli } from './gemini-cli-adapter.js';
export { OpenCodeAdapter, openCodeDriverClass, registerOpenCode } from './opencode-adapter.js';
export { PiAdapter, piDriverClass, registerPi } from './pi-adapter.js';
