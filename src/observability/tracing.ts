/**
 * OpenTelemetry tracing for the worker through Temporal's interceptors: a span per run (`RunWorkflow:agentRun`),
 * per activity scheduled and run (`StartActivity:*`, `RunActivity:*`; `RunActivity:runTurn` is the turn), with
 * tokens and cost as attributes, exported over OTLP/HTTP.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import {
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryActivityOutboundInterceptor,
  makeWorkflowExporter,
} from '@temporalio/interceptors-opentelemetry/lib/worker/index.js';
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry/lib/client/index.js';
import type { WorkerOptions } from '@temporalio/worker';
import type { TracingConfig } from './config.js';
import { TurnTelemetryInterceptor } from './turn-telemetry.js';

const require = createRequire(import.meta.url);

/** Workflow interceptor modules, in order: OpenTelemetry's (the spans), then ours (run attributes inside them). */
export const workflowInterceptorModules: readonly string[] = [
  require.resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors'),
  fileURLToPath(new URL('./workflow-interceptors.ts', import.meta.url)),
];

export interface WorkerTracing {
  readonly spanProcessor: SpanProcessor;
  /** Interceptors and sinks to merge into Worker.create's options. */
  readonly workerOptions: Pick<WorkerOptions, 'interceptors' | 'sinks'>;
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
    workerOptions: {
      interceptors: {
        client: { workflow: [new OpenTelemetryWorkflowClientInterceptor()] },
        workflowModules: [...workflowInterceptorModules],
        // First is outermost: the OpenTelemetry span is active when ours sets the turn's attributes on it.
        activity: [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) }), (ctx) => ({ inbound: new TurnTelemetryInterceptor(ctx) })],
      },
      sinks: { exporter: makeWorkflowExporter(spanProcessor, resource) },
    },
    shutdown: () => spanProcessor.shutdown(),
  };
}
