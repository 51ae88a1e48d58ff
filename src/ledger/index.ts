/** The ledger: runs, attempts, model calls, steps, events, approvals and blobs, in SQLite (embedded) or PostgreSQL. */
export * from './types.js';
export * from './sqlite-ledger.js';
export * from './cost.js';
export * from './postgres-ledger.js';
export * from './postgres-migrations.js';
export * from './open.js';
