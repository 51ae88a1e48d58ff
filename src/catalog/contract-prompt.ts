/** The envelope contract appended to every agent's own system prompt. */
import { LOOPBACK_SERVER_NAME, LOOPBACK_TOOLS } from '../contracts/loopback.js';
import { z } from 'zod';
import type { ActionDefinition } from '../actions/types.js';
import { STEP_EXAMPLES } from '../envelope/parse.js';
import type { AgentConfig } from './schema.js';

/** An allowed action as the harness sees it: catalog name and description, implementation's parameters, per-run cap. */
export type ContractAction = Pick<ActionDefinition, 'name' | 'description' | 'parameters'> & {
  readonly maxExecutionsPerRun?: number;
};

export interface ContractPromptInput {
  readonly agent: Pick<AgentConfig, 'name'>;
  readonly actions: readonly ContractAction[];
  readonly subAgents: readonly { readonly name: string; readonly description: string }[];
  /** Action calls one envelope may ask for (stated to the harness when it has actions). */
  readonly maxActionsPerEnvelope?: number;
  /** The MCP loopback is on: its tools are named to the harness (docs/mcp.md). */
  readonly loopback?: boolean;
}

/** The JSON Schema of an action's parameters as the harness should write them (input side: defaults optional). */
export function actionParametersJsonSchema(parameters: z.ZodType): Record<string, unknown> {
  const schema = z.toJSONSchema(parameters, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  // The meta-schema URL is noise to a model.
  const { $schema: _ignored, ...rest } = schema;
  return rest;
}

function byName<T extends { readonly name: string }>(items: readonly T[]): T[] {
  return [...items].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

function actionsSection(actions: readonly ContractAction[], maxPerEnvelope: number | undefined): string[] {
  if (actions.length === 0) return ['No actions are available to you: do not use the "actions" step.'];
  const cap = maxPerEnvelope !== undefined ? ` At most ${maxPerEnvelope} actions per envelope: an envelope asking for more runs none of them.` : '';
  const lines = [`Use only these action names; a call to any other name is refused.${cap}`];
  for (const action of byName(actions)) {
    const cap = action.maxExecutionsPerRun !== undefined ? ` (at most ${action.maxExecutionsPerRun} per run)` : '';
    lines.push(`- ${action.name}${cap}: ${action.description || 'no description'}`);
    lines.push(`  params JSON Schema: ${JSON.stringify(actionParametersJsonSchema(action.parameters))}`);
  }
  return lines;
}

function subAgentsSection(subAgents: ContractPromptInput['subAgents']): string[] {
  if (subAgents.length === 0) return ['No sub-agents are available to you: do not use the "sub-agent" step.'];
  return [
    'Use only these agent names:',
    ...byName(subAgents).map((s) => `- ${s.name}: ${s.description || 'no description'}`),
  ];
}

function loopbackSection(): string[] {
  return [
    `### Reading this run's data mid-turn (MCP server "${LOOPBACK_SERVER_NAME}")`,
    `Your MCP server "${LOOPBACK_SERVER_NAME}" reads, and only reads: ${LOOPBACK_TOOLS.map((t) => `\`${t}\``).join(', ')} ` +
      "(this run's status and budget left, its steps so far, the texts they store by reference, and the resources your operator registered). " +
      'Use it when you need them; it never acts: actions still go in the envelope.',
  ];
}

/** Builds the contract text; the same input always gives the same text. */
export function buildContractPrompt(input: ContractPromptInput): string {
  return [
    '## How to end every turn (durable-harness envelope contract)',
    '',
    `You are the agent "${input.agent.name}", run by durable-harness. Work in your workspace with your own tools. ` +
      'Anything outside it (the actions and sub-agents below, a question to the user) and the end of the task are ' +
      'requested with a next-step envelope, which the runtime validates and carries out.',
    '',
    'End every turn with exactly one JSON object with a "step" field, as the last thing in your reply. ' +
      'Use exactly the fields shown for its step type; nothing else. The five step types:',
    '',
    '1. "success": the task is complete; "result" says what you did.',
    `   ${STEP_EXAMPLES.success}`,
    '2. "failed": the task cannot be done; "reason" says why.',
    `   ${STEP_EXAMPLES.failed}`,
    '3. "actions": run one or more of the actions below, in order ("params" must match the action\'s schema; ' +
      '"message" is optional). The results arrive as your next turn.',
    `   ${STEP_EXAMPLES.actions}`,
    '4. "sub-agent": hand a task to one of the sub-agents below; its answer arrives as your next turn. ' +
      '"terminateAfter": true ends your run with its answer.',
    `   ${STEP_EXAMPLES['sub-agent']}`,
    '5. "chat": ask the user a question; the reply arrives as your next turn.',
    `   ${STEP_EXAMPLES.chat}`,
    '',
    '### Actions',
    ...actionsSection(input.actions, input.maxActionsPerEnvelope),
    '',
    '### Sub-agents',
    ...subAgentsSection(input.subAgents),
    '',
    ...(input.loopback ? [...loopbackSection(), ''] : []),
    'End every turn with exactly one JSON object like the examples above, and nothing after it. ' +
      'A reply without a valid envelope is sent back to you with what was wrong.',
  ].join('\n');
}

/** The agent's own system prompt followed by the contract. */
export function joinSystemPrompt(agentPrompt: string, contract: string): string {
  const own = agentPrompt.trim();
  return own ? `${own}\n\n${contract}` : contract;
}

/**
 * The turn input for a harness that takes no system prompt: the contract rides in front of the task, on every
 * turn that starts a fresh session (a resumed session already has it in its history).
 */
export function promptWithContract(systemPrompt: string, prompt: string): string {
  return [
    '# Instructions (your harness takes no system prompt, so durable-harness sends them here)',
    '',
    systemPrompt.trim(),
    '',
    '# Your input for this turn',
    '',
    prompt,
  ].join('\n');
}
