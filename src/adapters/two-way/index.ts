/** Room adapters/two-way: the top-down sessions of the two-way protocols (ACP, codex app-server, pi RPC). */
export { acpPermissionRequest, acpSession, promptResult, type AcpAgent, type PromptResult, type StoredCall } from './acp.js';
export { messageStreams, type MessageStreams } from './streams.js';
