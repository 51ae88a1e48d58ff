/** Room adapters/two-way: the top-down sessions of the two-way protocols (ACP over its SDK, codex app-server, pi RPC). */
export { acpPermissionRequest, acpSession, promptResult, type AcpAgent, type PromptResult, type StoredCall } from './acp.js';
export { codexAppServerSession, tokenBreakdown, unwrapShell, type CodexHost, type TokenBreakdown } from './codex-app-server.js';
export { errorText, methodNotFound, RpcClosed, RpcError, RpcPeer, type RpcHandlers } from './json-rpc.js';
export { piGateExtension, piGateTitle, piPermissionRequest, piRpcSession, type PiHost } from './pi-rpc.js';
export { messageStreams, type MessageStreams } from './streams.js';
