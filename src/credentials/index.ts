export * from './resolve.js';
export * from './redact.js';
