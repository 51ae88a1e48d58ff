/** Actions: what a harness may ask the workflow to do on its behalf, each validated and capped. */
import type { z } from 'zod';

export interface ActionContext {
  readonly workflowId: string;
  readonly agent: string;
  /** Workspace on the worker's host; actions must stay inside it. */
  readonly hostWorkspacePath: string;
  readonly settings: Readonly<Record<string, unknown>>;
  readonly signal?: AbortSignal;
}

/** A registered action implementation. */
export interface ActionDefinition<P = unknown> {
  readonly name: string;
  readonly description: string;
  readonly parameters: z.ZodType<P>;
  execute(params: P, ctx: ActionContext): Promise<unknown>;
}
