/** The catalog file (harnesses, agents, actions): schema, loading with clear errors, hashing and watching for edits. */
export * from './schema.js';
export * from './load.js';
export * from './contract-prompt.js';
export * from './hash.js';
export * from './watch.js';
