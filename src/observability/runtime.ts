/** The SDK runtime (process-wide, installed once before any connection): log level and metrics exporter. */
import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import type { ObservabilityConfig } from './config.js';

/** Installs the runtime with the configured metrics exporter (Prometheus or OTLP), or none. */
export function installRuntime(options: { logLevel?: LogLevel; metrics?: ObservabilityConfig['metrics'] } = {}): void {
  Runtime.install({
    logger: new DefaultLogger(options.logLevel ?? 'WARN'),
    ...(options.metrics ? { telemetryOptions: { metrics: options.metrics } } : {}),
  });
}
