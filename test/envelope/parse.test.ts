import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import {
  checkActionCalls,
  checkJsonSchema,
  DEFAULT_MAX_ACTIONS_PER_ENVELOPE,
  FEEDBACK_PREFIX,
  formatFeedback,
  parseEnvelope,
  STEP_EXAMPLES,
  STEP_TYPES,
  type EnvelopeRules,
  validateJsonSchema,
} from '../../src/envelope/index.js';

const writeParams = z.strictObject({ path: z.string().min(1), content: z.string() });
const listParams = z.strictObject({ path: z.string().default('.') });

const rules: EnvelopeRules = {
  allowedActions: {
    write_file: { parameters: writeParams },
    list_files: { parameters: listParams },
  },
  allowedSubAgents: ['reviewer'],
};

const jsonRules: EnvelopeRules = {
  allowedActions: {
    write_file: { parameters: z.toJSONSchema(writeParams, { io: 'input' }) as Record<string, unknown> },
    list_files: { parameters: z.toJSONSchema(listParams, { io: 'input' }) as Record<string, unknown> },
  },
  allowedSubAgents: [],
};

function ok(text: string, r: EnvelopeRules = rules) {
  const result = parseEnvelope(text, r);
  if (!result.ok) throw new Error(`expected ok, got: ${result.problem}`);
  return result;
}

function problem(text: string, r: EnvelopeRules = rules): string {
  const result = parseEnvelope(text, r);
  if (result.ok) throw new Error(`expected a problem, got ${JSON.stringify(result.step)}`);
  return result.problem;
}

describe('parseEnvelope: where the JSON sits', () => {
  it('plain JSON', () => {
    expect(ok('{"step":"success","result":"done"}').step).toEqual({ step: 'success', result: 'done' });
  });

  it('inside a ```json fence and a bare ``` fence', () => {
    const fenced = 'Done.\n```json\n{\n  "step": "chat",\n  "message": "which branch?"\n}\n```\n';
    expect(ok(fenced).step).toEqual({ step: 'chat', message: 'which branch?' });
    expect(ok('```\n{"step":"failed","reason":"no"}\n```').step).toEqual({ step: 'failed', reason: 'no' });
  });

  it('prose before and after', () => {
    const text = 'I wrote the file. Here is my step:\n{"step":"success","result":"ok"}\nThanks! {not json}';
    expect(ok(text).step).toEqual({ step: 'success', result: 'ok' });
  });

  it('two objects: the last one with a step wins', () => {
    const text = '{"step":"chat","message":"first"}\nthen\n{"step":"success","result":"second"}\n{"other":1}';
    expect(ok(text).step).toEqual({ step: 'success', result: 'second' });
  });

  it('nested braces and escaped quotes inside strings', () => {
    const content = 'function f() { return "}{"; } // \\"quoted\\" {';
    const text = `Here:\n${JSON.stringify({ step: 'actions', actions: [{ name: 'write_file', params: { path: 'f.js', content } }] })}`;
    const result = ok(text);
    expect(result.step).toEqual({
      step: 'actions',
      actions: [{ name: 'write_file', params: { path: 'f.js', content } }],
    });
    expect(result.actionErrors).toEqual([]);
  });

  it('finds the envelope after an unbalanced brace in prose', () => {
    const text = 'The config uses { for blocks. {"step":"success","result":"ok"}';
    expect(ok(text).step).toEqual({ step: 'success', result: 'ok' });
  });

  it('empty text', () => {
    expect(problem('')).toMatch(/^the reply was empty; no JSON object with a "step" field found/);
    expect(problem('   \n')).toContain('no JSON object with a "step" field found');
  });

  it('prose only, and JSON without step', () => {
    expect(problem('I am done!')).toMatch(/^no JSON object with a "step" field found\. Example of a valid envelope: \{/);
    expect(problem('{"result":"x"}')).toContain('(found a JSON object with fields: result)');
  });

  it('an envelope that is not valid JSON says so', () => {
    expect(problem('{"step":"success","result":"x",}')).toMatch(/not valid JSON/);
    expect(problem('{"step":"success","result":"x"')).toMatch(/never closed/);
  });

  it('huge text is handled quickly', () => {
    const prose = 'lorem { ipsum "dolor" } sit amet '.repeat(60_000); // ~2 MB
    const braces = '{'.repeat(200_000);
    const start = Date.now();
    expect(ok(`${prose}\n{"step":"success","result":"big"}\n${prose}`).step).toEqual({ step: 'success', result: 'big' });
    expect(ok(`${braces}{"step":"success","result":"x"}`).step).toEqual({ step: 'success', result: 'x' });
    expect(problem(prose + braces)).toContain('no JSON object with a "step" field found');
    expect(Date.now() - start).toBeLessThan(5_000);
  });
});

describe('parseEnvelope: strict about shape', () => {
  it('wrong step value', () => {
    expect(problem('{"step":"done","result":"x"}')).toMatch(
      /^"step" must be one of success, failed, actions, sub-agent, chat \(got "done"\)\. Example of a valid envelope: /,
    );
    expect(problem('{"step":3}')).toContain('(got 3)');
  });

  it('missing fields', () => {
    expect(problem('{"step":"success"}')).toMatch(/^result: missing required field \(string\)\. Example of a valid "success" envelope: \{"step":"success"/);
    expect(problem('{"step":"actions","actions":[{"params":{}}]}')).toContain('actions[0].name: missing required field (string)');
    expect(problem('{"step":"actions","actions":[]}')).toContain('actions:');
  });

  it('extra fields', () => {
    expect(problem('{"step":"success","result":"x","extra":1}')).toContain(
      'extra: unexpected field (allowed: step, result)',
    );
    expect(problem('{"step":"actions","actions":[{"name":"write_file","args":{}}]}')).toContain(
      'actions[0].args: unexpected field (allowed: name, params)',
    );
  });

  it('wrong types', () => {
    expect(problem('{"step":"chat","message":42}')).toContain('message: expected string, got number');
    expect(problem('{"step":"actions","actions":[{"name":"x","params":[]}]}')).toContain(
      'actions[0].params: expected object',
    );
  });

  it('sub-agent defaults terminateAfter to false', () => {
    expect(ok('{"step":"sub-agent","agent":"reviewer","message":"look"}').step).toEqual({
      step: 'sub-agent',
      agent: 'reviewer',
      message: 'look',
      terminateAfter: false,
    });
  });

  it('every documented example is valid', () => {
    for (const type of STEP_TYPES) {
      const result = parseEnvelope(STEP_EXAMPLES[type], rules);
      expect(result.ok, type).toBe(true);
    }
  });
});

describe('action calls', () => {
  const text = JSON.stringify({
    step: 'actions',
    actions: [
      { name: 'write_file', params: { path: 'a.txt', content: 'x' } },
      { name: 'delete_everything', params: {} },
      { name: 'write_file', params: { path: 7, content: 'x' } },
      { name: 'list_files' },
    ],
  });

  it('unknown names and bad params are action errors, not parse failures (zod rules)', () => {
    const result = ok(text);
    expect(result.actionErrors).toEqual([
      {
        index: 1,
        name: 'delete_everything',
        kind: 'unknown-action',
        problem: 'actions[1].name: action "delete_everything" is not available (allowed: list_files, write_file)',
      },
      { index: 2, name: 'write_file', kind: 'invalid-params', problem: 'actions[2].params.path: expected string, got number' },
    ]);
  });

  it('works the same with JSON Schema rules, and applies defaults', () => {
    const result = ok(text, jsonRules);
    expect(result.actionErrors.map((e) => [e.index, e.kind, e.problem])).toEqual([
      [1, 'unknown-action', 'actions[1].name: action "delete_everything" is not available (allowed: list_files, write_file)'],
      [2, 'invalid-params', 'actions[2].params.path: expected string, got number'],
    ]);
    const verdicts = checkActionCalls(result.step, jsonRules);
    expect(verdicts[0]).toEqual({ index: 0, name: 'write_file', ok: true, params: { path: 'a.txt', content: 'x' } });
    expect(verdicts[3]).toEqual({ index: 3, name: 'list_files', ok: true, params: { path: '.' } });
  });

  it('zod rules apply defaults too', () => {
    const verdicts = checkActionCalls(ok(text).step, rules);
    expect(verdicts[3]).toEqual({ index: 3, name: 'list_files', ok: true, params: { path: '.' } });
  });

  it('unknown sub-agent is reported, known is fine', () => {
    expect(ok('{"step":"sub-agent","agent":"reviewer","message":"m"}').actionErrors).toEqual([]);
    expect(ok('{"step":"sub-agent","agent":"hacker","message":"m"}').actionErrors).toEqual([
      { index: 0, name: 'hacker', kind: 'unknown-sub-agent', problem: 'sub-agent "hacker" is not available to this agent (allowed: reviewer)' },
    ]);
  });

  it('"constructor" and other prototype names are not actions', () => {
    const r = ok('{"step":"actions","actions":[{"name":"constructor","params":{}}]}');
    expect(r.actionErrors[0]?.kind).toBe('unknown-action');
  });
});

describe('parseEnvelope: the action cap per envelope', () => {
  const envelope = (n: number, call = { name: 'list_files', params: {} }) => JSON.stringify({ step: 'actions', actions: Array.from({ length: n }, () => call) });

  it('an envelope at the cap is fine; one over it is refused whole, naming the cap, before any call is checked', () => {
    const capped = { ...rules, maxActions: 3 };
    expect(ok(envelope(3), capped).step).toMatchObject({ step: 'actions' });
    const over = parseEnvelope(envelope(4, { name: 'no_such_action', params: { junk: 1 } } as never), capped);
    expect(over).toEqual({
      ok: false,
      problem: "the envelope asks for 4 actions, over this agent's cap of 3 actions per envelope (maxActionsPerEnvelope), so none of them ran; ask for at most 3 actions per envelope and send the rest in later turns",
      actionsOverCap: { asked: 4, cap: 3 },
    });
  });

  it('rules frozen before the cap existed get the default', () => {
    expect(ok(envelope(DEFAULT_MAX_ACTIONS_PER_ENVELOPE)).step).toMatchObject({ step: 'actions' });
    expect(parseEnvelope(envelope(DEFAULT_MAX_ACTIONS_PER_ENVELOPE + 1), rules)).toMatchObject({ ok: false, actionsOverCap: { asked: DEFAULT_MAX_ACTIONS_PER_ENVELOPE + 1, cap: DEFAULT_MAX_ACTIONS_PER_ENVELOPE } });
  });

  it('90,000 calls (a 3.6 MB reply) are counted, not validated one by one', () => {
    const text = envelope(90_000, { name: 'write_file', params: { path: 'a.txt' } } as never);
    const started = performance.now();
    const result = parseEnvelope(text, rules);
    expect(result).toMatchObject({ ok: false, actionsOverCap: { asked: 90_000, cap: DEFAULT_MAX_ACTIONS_PER_ENVELOPE } });
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('ten thousand problems in one envelope are answered with the first twenty and a count', () => {
    const fields = Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`x${i}`, 1]));
    const p = problem(JSON.stringify({ step: 'success', result: 'r', ...fields }));
    expect(p.split('unexpected field')).toHaveLength(21);
    expect(p).toContain('… and 9980 more problems');
    expect(p.length).toBeLessThan(2000);
    const params = parseEnvelope(JSON.stringify({ step: 'actions', actions: [{ name: 'write_file', params: { path: 'a', content: 'b', ...fields } }] }), jsonRules);
    expect(params.ok && params.actionErrors[0]!.problem).toContain('… and 9980 more problems');
  });
});

describe('checkJsonSchema', () => {
  it('reports missing, extra, enum and range problems', () => {
    const schema = z.toJSONSchema(
      z.strictObject({ mode: z.enum(['a', 'b']), n: z.number().int().min(1).optional(), s: z.string().min(1) }),
      { io: 'input' },
    ) as Record<string, unknown>;
    expect(checkJsonSchema(schema, { mode: 'c', n: 0, x: 1 }, 'p')).toEqual([
      { path: 'p.s', message: 'missing required field (string)' },
      { path: 'p.x', message: 'unexpected field (allowed: mode, n, s)' },
      { path: 'p.mode', message: 'expected one of "a", "b" (got "c")' },
      { path: 'p.n', message: 'must be >= 1' },
    ]);
    expect(checkJsonSchema(schema, { mode: 'a', s: 'x' })).toEqual([]);
  });

  it('holds every keyword an action may declare — formats, $ref, allOf, nested items — and fills nested defaults', () => {
    const schema = {
      $defs: { file: { type: 'object', properties: { path: { type: 'string', minLength: 1 }, mode: { type: 'string', default: '0644' } }, required: ['path'] } },
      type: 'object',
      properties: {
        notify: { type: 'string', format: 'email' },
        files: { type: 'array', items: { $ref: '#/$defs/file' }, maxItems: 2 },
        size: { allOf: [{ type: 'integer' }, { minimum: 1 }, { maximum: 10 }] },
      },
      required: ['files'],
      additionalProperties: false,
    };
    expect(checkJsonSchema(schema, { notify: 'not-an-address', files: [{ path: '' }, {}], size: 11 }, 'p')).toEqual([
      { path: 'p.notify', message: 'must be a valid email' },
      { path: 'p.files[0].path', message: 'must not be empty' },
      { path: 'p.files[1].path', message: 'missing required field (string)' },
      { path: 'p.size', message: 'must be <= 10' },
    ]);
    const ok = validateJsonSchema(schema, { notify: 'ops@example.com', files: [{ path: 'a' }] });
    expect(ok).toEqual({ problems: [], value: { notify: 'ops@example.com', files: [{ path: 'a', mode: '0644' }] } });
  });

  it('a schema that is not valid JSON Schema is a problem naming the fix, not a crash', () => {
    expect(checkJsonSchema({ type: 'object', properties: { a: { type: 'strnig' } } }, { a: 1 }, 'p')).toEqual([
      { path: 'p', message: expect.stringMatching(/parameter schema is not valid JSON Schema .*fix the action's definition/) },
    ]);
  });
});

describe('formatFeedback', () => {
  it('starts with the fixed prefix and carries the problem', () => {
    const text = formatFeedback('"step" must be one of ...');
    expect(text.startsWith('Your last reply was not a valid envelope')).toBe(true);
    expect(FEEDBACK_PREFIX).toBe('Your last reply was not a valid envelope');
    expect(text).toContain('"step" must be one of ...');
  });
});
