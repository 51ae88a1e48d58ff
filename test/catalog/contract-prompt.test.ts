import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { readFileAction, writeFileAction } from '../../src/actions/index.js';
import { buildContractPrompt, joinSystemPrompt } from '../../src/catalog/index.js';
import { parseEnvelope, STEP_EXAMPLES, STEP_TYPES } from '../../src/envelope/index.js';

const input = {
  agent: { name: 'coder' },
  actions: [{ ...writeFileAction, maxExecutionsPerRun: 3 }, readFileAction],
  subAgents: [{ name: 'reviewer', description: 'Reviews diffs.' }],
};

describe('buildContractPrompt', () => {
  it('is deterministic, independent of input order', () => {
    const a = buildContractPrompt(input);
    const b = buildContractPrompt({ ...input, actions: [...input.actions].reverse() });
    expect(a).toBe(b);
    expect(buildContractPrompt(input)).toBe(a);
  });

  it('shows the five step types with a valid example each', () => {
    const text = buildContractPrompt(input);
    for (const type of STEP_TYPES) {
      expect(text).toContain(`"${type}"`);
      expect(text).toContain(STEP_EXAMPLES[type]);
    }
    expect(text).toContain('End every turn with exactly one JSON object');
    // The contract must survive its own parser: the last example in it is valid.
    expect(parseEnvelope(text, { allowedActions: {}, allowedSubAgents: [] }).ok).toBe(true);
  });

  it('lists allowed actions with caps and input JSON schemas, and sub-agents', () => {
    const text = buildContractPrompt(input);
    expect(text).toContain('- write_file (at most 3 per run): Write a UTF-8 text file');
    expect(text).toContain('- read_file: Read a UTF-8 text file');
    const schemaLine = text.split('\n').find((l) => l.includes('params JSON Schema') && l.includes('maxBytes'));
    const schema = JSON.parse(schemaLine!.split('params JSON Schema: ')[1]!) as { required: string[]; $schema?: string };
    expect(schema.required).toEqual(['path']);
    expect(schema.$schema).toBeUndefined();
    expect(text).toContain('- reviewer: Reviews diffs.');
  });

  it('says when nothing is available', () => {
    const text = buildContractPrompt({ agent: { name: 'solo' }, actions: [], subAgents: [] });
    expect(text).toContain('No actions are available to you');
    expect(text).toContain('No sub-agents are available to you');
  });

  it('handles defaults in schemas as optional', () => {
    const text = buildContractPrompt({
      agent: { name: 'x' },
      actions: [{ name: 'ls', description: 'list', parameters: z.strictObject({ path: z.string().default('.') }) }],
      subAgents: [],
    });
    expect(text).toContain('{"type":"object","properties":{"path":{"default":".","type":"string"}},"additionalProperties":false}');
  });

  it('joins with the agent prompt', () => {
    expect(joinSystemPrompt('  Own prompt. ', 'C')).toBe('Own prompt.\n\nC');
    expect(joinSystemPrompt('', 'C')).toBe('C');
  });
});
