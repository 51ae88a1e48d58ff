/** The next-step envelope a turn ends with: parsing, validation and action parameter schemas. */
export * from '../contracts/envelope.js';
export * from './parse.js';
export * from './json-schema.js';
