/** Stable `ApplicationFailure` types: the one list lives beside the workflow (src/workflows/failure-types.ts). */
export { FailureTypes, failureTypes, isConfigurationFailure, type FailureType } from '../workflows/failure-types.js';
