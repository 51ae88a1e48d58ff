/**
 * OpenTelemetry tracing for the worker through the SDK's `OpenTelemetryPlugin`: a span per run
 * (`RunWorkflow:agentRun`), per activity scheduled and run (`StartActivity:*`, `RunActivity:*`; `RunActivity:runTurn`
 * is the turn), with tokens and cost as attributes, exported over OTLP/HTTP.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, NoopSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OpenTelemetryPlugin } from '@temporalio/interceptors-opentelemetry';
import { SimplePlugin } from '@temporalio/plugin';
import type { TracingConfig } from './config.js';

/** Ours after OpenTelemetry's: puts the run's agent, outcome, tokens and cost on the `RunWorkflow:agentRun` span. */
const runAttributesModule = [
  fileURLToPath(new URL('./workflow-interceptors.js', import.meta.url)),
  fileURLToPath(new URL('./workflow-interceptors.ts', import.meta.url)),
].find((file) => existsSync(file))!;

export interface WorkerTracing {
  readonly spanProcessor: SpanProcessor;
  /**
   * Worker plugins: OpenTelemetry's, then the run's attributes. Put them before `durableHarnessPlugin` (first is
   * outermost, so the activity's span is active when the turn's attributes are set on it), and pass them to
   * `bundleWorkflowCode` for a prebuilt bundle: the workflow spans are bundled in.
   */
  readonly plugins: readonly SimplePlugin[];
  /** Exports what is buffered; call before the process exits. */
  shutdown(): Promise<void>;
}

let registered: BasicTracerProvider | undefined;

/** Starts the process-wide tracer provider (once) and returns what a worker needs to trace through it. */
export function startTracing(config: TracingConfig, options: { spanProcessor?: SpanProcessor } = {}): WorkerTracing {
  const resource = new Resource({ 'service.name': config.serviceName });
  const spanProcessor = options.spanProcessor ?? new BatchSpanProcessor(new OTLPTraceExporter({ url: config.url, headers: { ...config.headers } }), { scheduledDelayMillis: config.scheduleDelayMs });
  if (!registered) {
    registered = new BasicTracerProvider({ resource });
    registered.register({ contextManager: new AsyncLocalStorageContextManager().enable() });
  }
  registered.addSpanProcessor(spanProcessor);
  return {
    spanProcessor,
    plugins: tracingPlugins(resource, spanProcessor),
    shutdown: () => spanProcessor.shutdown(),
  };
}

function tracingPlugins(resource: Resource, spanProcessor: SpanProcessor): SimplePlugin[] {
  const runAttributes = new SimplePlugin({ name: 'durable-harness-run-attributes', workerInterceptors: { workflowModules: [runAttributesModule] } });
  return [new OpenTelemetryPlugin({ resource, spanProcessor }), runAttributes];
}

/** The tracing plugins for `bundleWorkflowCode` alone (a bundle built ahead of time): they add only the workflow modules. */
export function tracingBundlerPlugins(): SimplePlugin[] {
  return tracingPlugins(new Resource({}), new NoopSpanProcessor());
}
