/** Actions: what a harness may ask the workflow to do on its behalf, each validated and capped. */
import type { z } from 'zod';
import type { SandboxFs } from '../sandbox/types.js';

export interface ActionContext {
  readonly workflowId: string;
  readonly agent: string;
  /**
   * The run's workspace, where the sandbox is (inside the container for Docker): paths are relative to it,
   * links are never followed. Actions never touch host paths.
   */
  readonly fs: SandboxFs;
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
