/**
 * Workflow-side interceptor module (bundled into the workflow code when tracing is on, after the OpenTelemetry
 * one): puts the run's agent, outcome, tokens and cost on the `RunWorkflow:agentRun` span. Deterministic: it only
 * reads the input and the result.
 */
import * as otel from '@opentelemetry/api';
import type { WorkflowExecuteInput, WorkflowInboundCallsInterceptor, WorkflowInterceptorsFactory, Next } from '@temporalio/workflow';
import { runAttributes } from './attributes.js';

class RunAttributesInterceptor implements WorkflowInboundCallsInterceptor {
  async execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const span = otel.trace.getActiveSpan();
    span?.setAttributes(runAttributes(input.args[0]));
    const result = await next(input);
    span?.setAttributes(runAttributes(input.args[0], result));
    return result;
  }
}

export const interceptors: WorkflowInterceptorsFactory = () => ({ inbound: [new RunAttributesInterceptor()] });
