/** The content-addressed blob store: large texts travel through history by reference (claim check). */
export * from '../contracts/text-ref.js';
export * from './store.js';
