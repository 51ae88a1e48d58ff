export * from './types.js';
export * from './sqlite-ledger.js';
export * from './cost.js';
export * from './postgres-ledger.js';
export * from './postgres-migrations.js';
export * from './open.js';
