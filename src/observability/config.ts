/**
 * Observability switches, all off by default, read from the environment of the worker:
 *
 *   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   OTLP/HTTP traces URL (e.g. http://collector:4318/v1/traces) — turns tracing on
 *   OTEL_EXPORTER_OTLP_ENDPOINT          or the collector's base URL (/v1/traces is appended)
 *   OTEL_EXPORTER_OTLP_HEADERS           "k=v,k=v" sent with every export (e.g. an API key)
 *   OTEL_SERVICE_NAME                    service.name of the spans (default durable-harness-worker)
 *   OTEL_TRACES_EXPORTER=none / OTEL_SDK_DISABLED=true   tracing off even with an endpoint set
 *   DURABLE_HARNESS_PROMETHEUS_ADDRESS   HOST:PORT where the worker serves Prometheus metrics at /metrics
 *   OTEL_EXPORTER_OTLP_METRICS_ENDPOINT  or push the same metrics over OTLP/HTTP (e.g. http://collector:4318/v1/metrics)
 */
import type { TelemetryOptions } from '@temporalio/worker';

type Env = Readonly<Record<string, string | undefined>>;

/** Raised for settings that cannot work; the message names the variable. */
export class ObservabilityConfigError extends Error {
  override readonly name = 'ObservabilityConfigError';
}

export interface TracingConfig {
  /** Full OTLP/HTTP traces URL. */
  readonly url: string;
  readonly serviceName: string;
  readonly headers: Readonly<Record<string, string>>;
  /** Batch export delay (OTEL_BSP_SCHEDULE_DELAY, default 5000 ms). */
  readonly scheduleDelayMs: number;
}

export interface ObservabilityConfig {
  readonly tracing?: TracingConfig;
  /** The SDK runtime's metrics exporter (Prometheus or OTLP), with the project's own metrics beside Temporal's. */
  readonly metrics?: NonNullable<TelemetryOptions['metrics']>;
}

function httpUrl(name: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ObservabilityConfigError(`${name}="${value}" is not a URL (expected e.g. http://collector:4318)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ObservabilityConfigError(`${name}: only OTLP over HTTP is supported here (http:// or https://), not ${url.protocol}`);
  return url.toString().replace(/\/$/, '');
}

function parseHeaders(text: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const part of (text ?? '').split(',').map((p) => p.trim()).filter(Boolean)) {
    const eq = part.indexOf('=');
    if (eq <= 0) throw new ObservabilityConfigError('OTEL_EXPORTER_OTLP_HEADERS: entries look like key=value');
    headers[decodeURIComponent(part.slice(0, eq).trim())] = decodeURIComponent(part.slice(eq + 1).trim());
  }
  return headers;
}

function hostPort(name: string, value: string): string {
  if (!/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(value)) throw new ObservabilityConfigError(`${name}="${value}" should be HOST:PORT, e.g. 0.0.0.0:9464`);
  return value;
}

/** Per-turn cost in USD spans cents to dollars; the runtime's default buckets are for milliseconds. */
const costBuckets = { durable_harness_turn_cost_usd: [0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] };

export function observabilityFromEnvironment(env: Env = process.env): ObservabilityConfig {
  const off = env.OTEL_SDK_DISABLED?.toLowerCase() === 'true' || env.OTEL_TRACES_EXPORTER?.toLowerCase() === 'none';
  const tracesEndpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const baseEndpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  let tracing: TracingConfig | undefined;
  if (!off && (tracesEndpoint || baseEndpoint)) {
    const url = tracesEndpoint ? httpUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', tracesEndpoint) : `${httpUrl('OTEL_EXPORTER_OTLP_ENDPOINT', baseEndpoint!)}/v1/traces`;
    const delay = Number(env.OTEL_BSP_SCHEDULE_DELAY ?? 5000);
    if (!Number.isFinite(delay) || delay < 0) throw new ObservabilityConfigError(`OTEL_BSP_SCHEDULE_DELAY="${env.OTEL_BSP_SCHEDULE_DELAY}" is not a number of milliseconds`);
    tracing = {
      url,
      serviceName: env.OTEL_SERVICE_NAME?.trim() || 'durable-harness-worker',
      headers: { ...parseHeaders(env.OTEL_EXPORTER_OTLP_HEADERS), ...parseHeaders(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS) },
      scheduleDelayMs: delay,
    };
  }
  const prometheus = env.DURABLE_HARNESS_PROMETHEUS_ADDRESS?.trim();
  const otlpMetrics = env.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT?.trim();
  if (prometheus && otlpMetrics) throw new ObservabilityConfigError('set DURABLE_HARNESS_PROMETHEUS_ADDRESS or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, not both: the SDK runtime exports metrics one way');
  let metrics: ObservabilityConfig['metrics'];
  if (prometheus) metrics = { prometheus: { bindAddress: hostPort('DURABLE_HARNESS_PROMETHEUS_ADDRESS', prometheus), countersTotalSuffix: true, histogramBucketOverrides: costBuckets } };
  else if (otlpMetrics) metrics = { otel: { url: httpUrl('OTEL_EXPORTER_OTLP_METRICS_ENDPOINT', otlpMetrics), http: true, headers: parseHeaders(env.OTEL_EXPORTER_OTLP_HEADERS), histogramBucketOverrides: costBuckets } };
  return { ...(tracing ? { tracing } : {}), ...(metrics ? { metrics } : {}) };
}
