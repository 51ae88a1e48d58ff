/**
 * A small JSON Schema checker for the subset `z.toJSONSchema` emits for action parameters.
 * Action schemas cross into workflow state as plain JSON, so this must stay free of Node built-ins.
 */

/** A JSON Schema object (the subset understood here; other keywords are ignored). */
export type JsonSchema = Readonly<Record<string, unknown>>;

/** One problem: where (e.g. `actions[0].params.path`) and what, in words a model can act on. */
export interface SchemaProblem {
  readonly path: string;
  readonly message: string;
}

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

function matchesType(value: unknown, type: string): boolean {
  const actual = typeOf(value);
  if (type === 'number') return actual === 'number' || actual === 'integer';
  return actual === type;
}

function join(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? (path ? `${path}.${key}` : key) : `${path}[${JSON.stringify(key)}]`;
}

function isSchema(value: unknown): value is JsonSchema {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Checks `value` against `schema`; returns every problem found (empty when valid). */
export function checkJsonSchema(schema: JsonSchema, value: unknown, path = ''): SchemaProblem[] {
  const problems: SchemaProblem[] = [];
  const at = (message: string) => problems.push({ path, message });

  const alternatives = (schema.anyOf ?? schema.oneOf) as unknown;
  if (Array.isArray(alternatives)) {
    const ok = alternatives.some((alt) => isSchema(alt) && checkJsonSchema(alt, value, path).length === 0);
    if (!ok) at('does not match any of the allowed forms');
    return problems;
  }

  if ('const' in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    at(`expected ${JSON.stringify(schema.const)}`);
    return problems;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    at(`expected one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')} (got ${JSON.stringify(value)})`);
    return problems;
  }

  const types = typeof schema.type === 'string' ? [schema.type] : Array.isArray(schema.type) ? (schema.type as string[]) : [];
  if (types.length > 0 && !types.some((t) => matchesType(value, t))) {
    at(`expected ${types.join(' or ')}, got ${typeOf(value) === 'integer' ? 'number' : typeOf(value)}`);
    return problems;
  }

  if (typeof value === 'string') checkString(schema, value, at);
  if (typeof value === 'number') checkNumber(schema, value, at);
  if (Array.isArray(value)) checkArray(schema, value, path, problems);
  else if (isSchema(value)) checkObject(schema, value, path, problems);
  return problems;
}

function checkString(schema: JsonSchema, value: string, at: (m: string) => void): void {
  if (typeof schema.minLength === 'number' && value.length < schema.minLength) {
    at(schema.minLength === 1 ? 'must not be empty' : `must be at least ${schema.minLength} characters`);
  }
  if (typeof schema.maxLength === 'number' && value.length > schema.maxLength) {
    at(`must be at most ${schema.maxLength} characters`);
  }
  if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern, 'u').test(value)) {
    at(`must match the pattern ${schema.pattern}`);
  }
}

function checkNumber(schema: JsonSchema, value: number, at: (m: string) => void): void {
  if (typeof schema.minimum === 'number' && value < schema.minimum) at(`must be >= ${schema.minimum}`);
  if (typeof schema.maximum === 'number' && value > schema.maximum) at(`must be <= ${schema.maximum}`);
  if (typeof schema.exclusiveMinimum === 'number' && value <= schema.exclusiveMinimum) {
    at(`must be > ${schema.exclusiveMinimum}`);
  }
  if (typeof schema.exclusiveMaximum === 'number' && value >= schema.exclusiveMaximum) {
    at(`must be < ${schema.exclusiveMaximum}`);
  }
}

function checkArray(schema: JsonSchema, value: readonly unknown[], path: string, problems: SchemaProblem[]): void {
  if (typeof schema.minItems === 'number' && value.length < schema.minItems) {
    problems.push({ path, message: `must have at least ${schema.minItems} item(s)` });
  }
  if (typeof schema.maxItems === 'number' && value.length > schema.maxItems) {
    problems.push({ path, message: `must have at most ${schema.maxItems} item(s)` });
  }
  if (isSchema(schema.items)) {
    const items = schema.items;
    value.forEach((item, i) => problems.push(...checkJsonSchema(items, item, join(path, i))));
  }
}

function checkObject(
  schema: JsonSchema,
  value: Readonly<Record<string, unknown>>,
  path: string,
  problems: SchemaProblem[],
): void {
  const properties = isSchema(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required) ? (schema.required as string[]) : [];
  for (const key of required) {
    if (!(key in value)) {
      const type = isSchema(properties[key]) ? (properties[key] as JsonSchema).type : undefined;
      problems.push({
        path: join(path, key),
        message: `missing required field${typeof type === 'string' ? ` (${type})` : ''}`,
      });
    }
  }
  for (const [key, item] of Object.entries(value)) {
    const propSchema = properties[key];
    if (isSchema(propSchema)) {
      problems.push(...checkJsonSchema(propSchema, item, join(path, key)));
    } else if (schema.additionalProperties === false) {
      const allowed = Object.keys(properties);
      problems.push({
        path: join(path, key),
        message: `unexpected field${allowed.length ? ` (allowed: ${allowed.join(', ')})` : ' (no fields allowed)'}`,
      });
    } else if (isSchema(schema.additionalProperties)) {
      problems.push(...checkJsonSchema(schema.additionalProperties, item, join(path, key)));
    }
  }
}
