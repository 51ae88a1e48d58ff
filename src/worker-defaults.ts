/** Defaults shared by the worker, the client and the command line. */
export const defaultTaskQueue = 'durable-harness';
export const defaultNamespace = 'default';
export const defaultTemporalAddress = '127.0.0.1:7233';
