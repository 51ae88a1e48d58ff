/** A run's frozen spec (resolved from the catalog once, stored by hash) and the policy the workflow keeps of it. */
export * from './types.js';
export * from './freeze.js';
