export * from './types.js';
export * from './registry.js';
export * from './builtin.js';
export { PathEscapeError, resolveInside, type ResolveInsideOptions } from '../sandbox/workspace.js';
