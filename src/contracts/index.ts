/** The run's vocabulary, shared by every room and importable by workflow code: the bottom of src/ (lint/rooms.js). */
export * from './cost.js';
export * from './envelope.js';
export * from './failures.js';
export * from './money.js';
export * from './permissions.js';
export * from './prompts.js';
export * from './repository.js';
export * from './run.js';
export * from './text-ref.js';
export * from './usage.js';
