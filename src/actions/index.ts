/** Turn-end actions: the built-in implementations, the registry a worker extends, and what an action sees of the sandbox. */
export * from './types.js';
export * from './registry.js';
export * from './builtin.js';
export { PathEscapeError, SandboxFsError } from '../sandbox/workspace-fs.js';
