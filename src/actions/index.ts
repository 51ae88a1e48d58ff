export * from './types.js';
export * from './registry.js';
export * from './builtin.js';
export * from './paths.js';
