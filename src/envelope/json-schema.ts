/**
 * Action parameters checked against their JSON Schema (what `z.toJSONSchema` emits, or a schema an action declares)
 * with ajv, every keyword of draft 2020-12 and the standard formats; defaults filled in. Problems come back in words
 * a model can act on, each at a path like `actions[0].params.path`.
 */
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

/** A JSON Schema object. */
export type JsonSchema = Readonly<Record<string, unknown>>;

/** One problem: where (e.g. `actions[0].params.path`) and what. */
export interface SchemaProblem {
  readonly path: string;
  readonly message: string;
}

// ajv-formats is CommonJS with its function as the default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;
const ajv = addFormats(new Ajv2020({ allErrors: true, useDefaults: true, verbose: true, strict: false }));

/** Compiled schemas by their JSON text: the same frozen schema arrives as a new object with every turn. */
const compiled = new Map<string, ValidateFunction | SchemaProblem>();
const MAX_COMPILED = 512;

function validatorFor(schema: JsonSchema): ValidateFunction | SchemaProblem {
  const key = JSON.stringify(schema);
  let entry = compiled.get(key);
  if (entry === undefined) {
    try {
      entry = ajv.compile(schema);
    } catch (err) {
      entry = { path: '', message: `the action's parameter schema is not valid JSON Schema (${(err as Error).message}); fix the action's definition` };
    }
    if (compiled.size >= MAX_COMPILED) compiled.delete(compiled.keys().next().value!);
    compiled.set(key, entry);
  }
  return entry;
}

/**
 * Checks `value` against `schema`; returns every problem found (empty when valid) and the value with the schema's
 * defaults filled in (a copy: `value` is never changed).
 */
export function validateJsonSchema(schema: JsonSchema, value: unknown, path = ''): { problems: SchemaProblem[]; value: unknown } {
  const validate = validatorFor(schema);
  if (typeof validate !== 'function') return { problems: [{ ...validate, path }], value };
  const copy = structuredClone(value);
  if (validate(copy)) return { problems: [], value: copy };
  return { problems: describe(validate.errors ?? [], path, value), value };
}

/** Checks `value` against `schema`; returns every problem found (empty when valid). */
export function checkJsonSchema(schema: JsonSchema, value: unknown, path = ''): SchemaProblem[] {
  return validateJsonSchema(schema, value, path).problems;
}

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

function join(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? (path ? `${path}.${key}` : key) : `${path}[${JSON.stringify(key)}]`;
}

/** A JSON pointer (`/a/0/b`) as a path below `base`; an index into an array is `[0]`. */
function pathOf(base: string, pointer: string, data: unknown): string {
  let path = base;
  let at = data;
  for (const raw of pointer.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(at)) {
      path = join(path, Number(key));
      at = at[Number(key)];
    } else {
      path = join(path, key);
      at = at !== null && typeof at === 'object' ? (at as Record<string, unknown>)[key] : undefined;
    }
  }
  return path;
}

/** The type a property's schema names, for "missing required field (string)". */
function propertyType(parent: unknown, property: string): string | undefined {
  const properties = (parent as { properties?: Record<string, { type?: unknown }> } | undefined)?.properties;
  const type = properties?.[property]?.type;
  return typeof type === 'string' ? type : undefined;
}

function message(error: ErrorObject): string {
  const p = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required': {
      const type = propertyType(error.parentSchema, String(p.missingProperty));
      return `missing required field${type ? ` (${type})` : ''}`;
    }
    case 'additionalProperties':
    case 'unevaluatedProperties': {
      const allowed = Object.keys((error.parentSchema as { properties?: object } | undefined)?.properties ?? {});
      return `unexpected field${allowed.length ? ` (allowed: ${allowed.join(', ')})` : ' (no fields allowed)'}`;
    }
    case 'type':
      return `expected ${String(p.type).split(',').join(' or ')}, got ${typeOf(error.data)}`;
    case 'enum':
      return `expected one of ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')} (got ${JSON.stringify(error.data)})`;
    case 'const':
      return `expected ${JSON.stringify(p.allowedValue)}`;
    case 'minLength':
      return p.limit === 1 ? 'must not be empty' : `must be at least ${String(p.limit)} characters`;
    case 'maxLength':
      return `must be at most ${String(p.limit)} characters`;
    case 'pattern':
      return `must match the pattern ${String(p.pattern)}`;
    case 'minItems':
      return `must have at least ${String(p.limit)} item(s)`;
    case 'maxItems':
      return `must have at most ${String(p.limit)} item(s)`;
    case 'anyOf':
    case 'oneOf':
      return 'does not match any of the allowed forms';
    case 'format':
      return `must be a valid ${String(p.format)}`;
    default:
      return error.message ?? `fails "${error.keyword}"`;
  }
}

/** ajv's errors as problems; a failed `anyOf`/`oneOf` is one problem, not one per alternative tried. */
function describe(errors: readonly ErrorObject[], base: string, data: unknown): SchemaProblem[] {
  const alternatives = errors.filter((e) => e.keyword === 'anyOf' || e.keyword === 'oneOf').map((e) => e.schemaPath);
  const inAlternative = (e: ErrorObject) => alternatives.some((schemaPath) => e.schemaPath !== schemaPath && e.schemaPath.startsWith(`${schemaPath}/`));
  return errors
    .filter((e) => !inAlternative(e))
    .map((e) => {
      const where = pathOf(base, e.instancePath, data);
      const field = e.keyword === 'required' ? String((e.params as { missingProperty: string }).missingProperty) : e.keyword === 'additionalProperties' ? String((e.params as { additionalProperty: string }).additionalProperty) : undefined;
      return { path: field === undefined ? where : join(where, field), message: message(e) };
    });
}
