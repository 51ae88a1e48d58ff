/** The deterministic run loop: `agentRun`, the entry point the worker bundles (its state, decisions and messages live beside it). */
export { agentRun } from './agent-run.js';
