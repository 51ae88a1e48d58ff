/** The next-step envelope a harness ends every turn with. Pure types: safe to import from workflows. */

export interface ActionCall {
  readonly name: string;
  readonly params: Record<string, unknown>;
}

export type NextStep =
  | { readonly step: 'success'; readonly result: string }
  | { readonly step: 'failed'; readonly reason: string }
  | { readonly step: 'actions'; readonly actions: readonly ActionCall[]; readonly message?: string }
  | { readonly step: 'sub-agent'; readonly agent: string; readonly message: string; readonly terminateAfter: boolean }
  | { readonly step: 'chat'; readonly message: string };

export type StepType = NextStep['step'];

/** Result of validating one envelope: the step, or exactly what was wrong (for the feedback turn). */
export type ValidationResult =
  | { readonly ok: true; readonly step: NextStep }
  | { readonly ok: false; readonly problem: string };
