/** Harness drivers: the v2 record contract, the one turn engine, the built-in drivers and the registry. */
export * from './types.js';
export type * from './driver.js';
export { runDriverTurn, driverTurn, longLineBytes, openCallsKey, sampledLinesPerTurn } from './engine.js';
export type { DriverRun, EngineOptions, TurnRequest } from './engine.js';
export { below, cliCapabilities, driverHome, jsonLines, numberSetting, parseJsonLine, resumeFailed, resumeFailedOnExit, sessionError, stringSetting } from './kit.js';
export type { DriverHome, HarnessNames, LineHandler } from './kit.js';
export { collectTurn, foldTurn } from './fold.js';
export type { TurnResult } from './fold.js';
export { addUsage, noUsage, subtractUsage, totalTokens, usageKnown, usageOf } from '../contracts/usage.js';
// What the driver contract's types name, and what runs a turn outside a worker (an out-of-tree driver's own tests).
export type { PermissionAnswer, PermissionGate, PermissionRequest } from '../permissions/types.js';
export type { ExecProcess, SandboxExecutor, SandboxFs } from '../sandbox/types.js';
export type { LineLimits } from '../sandbox/line-queue.js';
export { OversizedLine } from '../sandbox/line-queue.js';
export { LocalExecutor } from '../sandbox/local-executor.js';
export { LocalWorkspaceFs } from '../sandbox/workspace-fs.js';
export { mapStdioJsonLine, stdioJson, stdioJsonCapabilities, stdioJsonDriver, stdioJsonDriverClass } from './stdio-json-adapter.js';
export * as stdioJsonProtocol from './stdio-json-protocol.js';
export { builtinDrivers, defaultAdapterRegistry, driverRegistry, findDriver, UnknownDriverError } from './registry.js';
export type { AdapterRegistry, DriverRegistry } from './registry.js';
export { claudeCode, claudeCodeDriverClass } from './claude-code-adapter.js';
export { codex, codexDriverClass } from './codex-adapter.js';
export { geminiCli, geminiCliDriverClass } from './gemini-cli-adapter.js';
export { openCode, openCodeDriverClass } from './opencode-adapter.js';
export { pi, piDriverClass } from './pi-adapter.js';
export * as twoWay from './two-way/index.js';
