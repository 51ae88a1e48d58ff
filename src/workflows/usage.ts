/** Token arithmetic shared by the workflow, the activities and the command line. Pure: safe in workflows. */
import type { Usage } from '../adapters/types.js';

export const noUsage: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };

export function addUsage(a: Usage, b: Usage): Usage {
  return { input: a.input + b.input, output: a.output + b.output, cacheRead: a.cacheRead + b.cacheRead, cacheWrite: a.cacheWrite + b.cacheWrite };
}

/** What the token guardrail counts: input, output, cache reads and cache writes. */
export function totalTokens(u: Usage): number {
  return u.input + u.output + u.cacheRead + u.cacheWrite;
}
