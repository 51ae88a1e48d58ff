/** Credential grants: resolving secrets into a harness's environment per attempt, and redacting them everywhere else. */
export * from './resolve.js';
export * from './redact.js';
