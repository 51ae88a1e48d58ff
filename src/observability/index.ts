/** Observability: OpenTelemetry tracing plugins, runtime metrics and turn telemetry, configured from the environment. */
export * from './config.js';
export * from './attributes.js';
export * from './runtime.js';
export * from './tracing.js';
export * from './turn-telemetry.js';
