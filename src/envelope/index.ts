export * from './types.js';
export * from './parse.js';
export * from './json-schema.js';
