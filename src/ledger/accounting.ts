/** Accounting checks shared by every ledger implementation, so each names an unresolved id the same way. */
import type { PromptRunRecord } from './types.js';

/** What a ledger knows about the ids a prompt run references. */
export interface CatalogLookup {
  readonly promptExists: boolean;
  /** The vendor of `row.modelId`, or undefined when the model is unknown. */
  readonly modelVendor: string | undefined;
  readonly vendorExists: boolean;
}

/** Names every id of `row` that does not resolve, so the operator knows which catalog entry to fix. */
export function unresolvedAccounting(row: Pick<PromptRunRecord, 'workflowId' | 'turn' | 'promptId' | 'modelId' | 'vendorId'>, found: CatalogLookup): string[] {
  const problems: string[] = [];
  const where = `prompt run for ${row.workflowId} turn ${row.turn}`;
  if (!found.promptExists) {
    problems.push(`${where}: prompt id '${row.promptId}' is not in the catalog — sync the catalog so the agent's prompt is recorded`);
  }
  if (found.modelVendor === undefined) {
    problems.push(`${where}: model id '${row.modelId}' is not in the catalog — add it to the harness entry`);
  } else if (found.modelVendor !== row.vendorId) {
    problems.push(`${where}: model id '${row.modelId}' belongs to vendor '${found.modelVendor}', not '${row.vendorId}' — fix the harness entry`);
  }
  if (!found.vendorExists) {
    problems.push(`${where}: vendor id '${row.vendorId}' is not in the catalog — add it to the harness entry`);
  }
  return problems;
}
