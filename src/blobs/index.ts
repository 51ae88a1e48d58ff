export * from '../contracts/text-ref.js';
export * from './store.js';
