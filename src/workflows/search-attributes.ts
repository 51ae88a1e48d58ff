/** Search attributes every run carries, so operators can find runs in the Temporal UI. */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const agentAttribute = defineSearchAttributeKey('DurableHarnessAgent', SearchAttributeType.KEYWORD);
export const harnessAttribute = defineSearchAttributeKey('DurableHarnessHarness', SearchAttributeType.KEYWORD);
export const statusAttribute = defineSearchAttributeKey('DurableHarnessStatus', SearchAttributeType.KEYWORD);
export const tenantAttribute = defineSearchAttributeKey('DurableHarnessTenant', SearchAttributeType.KEYWORD);
export const costAttribute = defineSearchAttributeKey('DurableHarnessCostUsd', SearchAttributeType.DOUBLE);

/** How many permission requests of the run wait for an operator now (`DurableHarnessPendingApprovals > 0`). */
export const pendingApprovalsAttribute = defineSearchAttributeKey('DurableHarnessPendingApprovals', SearchAttributeType.INT);

/** All of them, for registering with a server (`temporal operator search-attribute create`). */
export const allSearchAttributes = [agentAttribute, harnessAttribute, statusAttribute, tenantAttribute, costAttribute, pendingApprovalsAttribute] as const;
