export * from '../contracts/envelope.js';
export * from './parse.js';
export * from './json-schema.js';
