export * from './types.js';
export * from './freeze.js';
