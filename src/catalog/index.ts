export * from './schema.js';
export * from './load.js';
export * from './contract-prompt.js';
export * from './hash.js';
export * from './watch.js';
