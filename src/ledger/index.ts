export * from './types.js';
export * from './sqlite-ledger.js';
export * from './cost.js';
