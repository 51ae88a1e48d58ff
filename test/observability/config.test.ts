/** Observability switches from the environment: off by default, each on by its variable, clear errors. */
import { describe, expect, it } from 'vitest';
import { observabilityFromEnvironment } from '../../src/observability/index.js';

describe('observabilityFromEnvironment', () => {
  it('is all off without configuration', () => {
    expect(observabilityFromEnvironment({})).toEqual({});
  });

  it('turns tracing on with an OTLP endpoint (base or traces URL) and reads the service name and headers', () => {
    expect(observabilityFromEnvironment({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).tracing).toMatchObject({ url: 'http://collector:4318/v1/traces', serviceName: 'durable-harness-worker' });
    const t = observabilityFromEnvironment({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ignored:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://otel.example/v1/traces',
      OTEL_SERVICE_NAME: 'workers-eu',
      OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=abc%3D,tenant=t1',
    }).tracing;
    expect(t).toMatchObject({ url: 'https://otel.example/v1/traces', serviceName: 'workers-eu', headers: { 'x-api-key': 'abc=', tenant: 't1' } });
    expect(observabilityFromEnvironment({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }).tracing).toBeUndefined();
    expect(observabilityFromEnvironment({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }).tracing).toBeUndefined();
  });

  it('serves Prometheus or pushes OTLP metrics, not both', () => {
    expect(observabilityFromEnvironment({ DURABLE_HARNESS_PROMETHEUS_ADDRESS: '0.0.0.0:9464' }).metrics).toMatchObject({ prometheus: { bindAddress: '0.0.0.0:9464' } });
    expect(observabilityFromEnvironment({ OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: 'http://c:4318/v1/metrics' }).metrics).toMatchObject({ otel: { url: 'http://c:4318/v1/metrics', http: true } });
    expect(() => observabilityFromEnvironment({ DURABLE_HARNESS_PROMETHEUS_ADDRESS: '0.0.0.0:9464', OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: 'http://c:4318/v1/metrics' })).toThrow(/not both/);
  });

  it('names the variable that is wrong', () => {
    expect(() => observabilityFromEnvironment({ DURABLE_HARNESS_PROMETHEUS_ADDRESS: '9464' })).toThrow(/DURABLE_HARNESS_PROMETHEUS_ADDRESS="9464" should be HOST:PORT/);
    expect(() => observabilityFromEnvironment({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4317' })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT: only OTLP over HTTP/);
    expect(() => observabilityFromEnvironment({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'not a url' })).toThrow(/is not a URL/);
    expect(() => observabilityFromEnvironment({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: 'novalue' })).toThrow(/key=value/);
  });
});
