/** Who may decide: operator keys, signed decisions and the operators a worker is configured with. */
export * from './keys.js';
export * from './decision.js';
export * from './config.js';
export * from './read-token.js';
