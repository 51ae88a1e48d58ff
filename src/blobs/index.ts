export * from './text-ref.js';
export * from './store.js';
