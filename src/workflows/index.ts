/** Workflow entry point bundled by the worker. */
export { agentRun } from './agent-run.js';
