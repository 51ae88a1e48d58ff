export * from './types.js';
export * from './sqlite-ledger.js';
