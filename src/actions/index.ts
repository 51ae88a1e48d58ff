export * from './types.js';
export * from './registry.js';
export * from './builtin.js';
export { PathEscapeError, SandboxFsError } from '../sandbox/workspace-fs.js';
