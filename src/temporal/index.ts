/** Temporal plumbing: finding the CLI, task queues per host, search attributes, and reconciling runs with the ledger. */
export * from './cli-path.js';
export * from './host-queue.js';
export * from './reconcile-runs.js';
export * from './search-attributes.js';
export * from './task-queue.js';
