/**
 * Who may decide, as the workers are configured: the operators file (`DURABLE_HARNESS_OPERATORS_FILE`, YAML or JSON)
 * names each operator, their public keys and roles, and the deployment's decision mode says whether decisions must
 * be signed (`signed`, the default of `worker`) or are taken from whoever reaches Temporal (`trusted-network`, the
 * default of `dev`, where the Temporal UI's own buttons work and `status` says decisions are not authenticated).
 */
import { readFileSync, statSync } from 'node:fs';
import type { KeyObject } from 'node:crypto';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { OperatorKeyError, keyIdOf, parsePublicKey } from './keys.js';

export const operatorRoles = ['approve', 'operate', 'read'] as const;
/** `approve`: approve and deny permission requests; `operate`: reply, retry, abandon, cancel; `read`: decode payloads through the codec server (read-token.ts). */
export type OperatorRole = (typeof operatorRoles)[number];

export const decisionModes = ['signed', 'trusted-network'] as const;
export type DecisionMode = (typeof decisionModes)[number];

/** A configured operator. */
export interface ConfiguredOperator {
  readonly name: string;
  readonly roles: readonly OperatorRole[];
  readonly keys: readonly { readonly keyId: string; readonly publicKey: string; readonly key: KeyObject }[];
}

/** The operators a worker knows. */
export interface OperatorDirectory {
  readonly operators: readonly ConfiguredOperator[];
  /** Where it was read from, for messages. */
  readonly source: string;
}

/** A broken operators file or mode (exit 2). */
export class OperatorConfigError extends Error {
  override readonly name = 'OperatorConfigError';
}

const fileSchema = z.strictObject({
  operators: z.array(
    z.strictObject({
      name: z.string().regex(/^[\w.@-]{1,64}$/, 'a name of 1-64 letters, digits and ._@-'),
      roles: z.array(z.enum(operatorRoles)).min(1),
      keys: z.array(z.string()).min(1),
    }),
  ),
});

/** Parses an operators file's text. */
export function parseOperators(text: string, source: string): OperatorDirectory {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new OperatorConfigError(`operators file ${source} is not YAML or JSON: ${(err as Error).message}`);
  }
  const parsed = fileSchema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`).join('; ');
    throw new OperatorConfigError(`invalid operators file ${source}: ${problems}. Expected "operators: [{name, roles: [approve|operate|read], keys: [ed25519:…]}]".`);
  }
  const seen = new Set<string>();
  const operators = parsed.data.operators.map((o, i) => {
    if (seen.has(o.name)) throw new OperatorConfigError(`invalid operators file ${source}: operators[${i}]: the name "${o.name}" is given twice`);
    seen.add(o.name);
    const keys = o.keys.map((publicKey, k) => {
      try {
        return { publicKey, keyId: keyIdOf(publicKey), key: parsePublicKey(publicKey, `operators[${i}].keys[${k}]`) };
      } catch (err) {
        throw new OperatorConfigError(`invalid operators file ${source}: ${(err as OperatorKeyError).message}`);
      }
    });
    return { name: o.name, roles: [...new Set(o.roles)], keys };
  });
  return { operators, source };
}

/** An empty directory: nobody can sign a decision a worker would accept. */
export const noOperators: OperatorDirectory = { operators: [], source: '(no DURABLE_HARNESS_OPERATORS_FILE)' };

/**
 * The operators of `DURABLE_HARNESS_OPERATORS_FILE`, re-read when the file changes (so adding or revoking a key needs
 * no restart); none when it is not set.
 */
export function operatorsFromEnvironment(env: Readonly<Record<string, string | undefined>> = process.env): () => OperatorDirectory {
  const file = env.DURABLE_HARNESS_OPERATORS_FILE;
  if (!file) return () => noOperators;
  let cached: { mtimeMs: number; size: number; directory: OperatorDirectory } | undefined;
  const load = (): OperatorDirectory => {
    let stat;
    try {
      stat = statSync(file);
    } catch (err) {
      throw new OperatorConfigError(`DURABLE_HARNESS_OPERATORS_FILE ${file} cannot be read: ${(err as Error).message}`);
    }
    if (!cached || cached.mtimeMs !== stat.mtimeMs || cached.size !== stat.size) {
      cached = { mtimeMs: stat.mtimeMs, size: stat.size, directory: parseOperators(readFileSync(file, 'utf8'), file) };
    }
    return cached.directory;
  };
  load(); // a broken file fails the worker's start, not the first decision
  return load;
}

/** The deployment's decision mode: `DURABLE_HARNESS_DECISIONS`, else `fallback` (`signed` for worker, `trusted-network` for dev). */
export function decisionModeFromEnvironment(env: Readonly<Record<string, string | undefined>>, fallback: DecisionMode): DecisionMode {
  const value = env.DURABLE_HARNESS_DECISIONS?.trim();
  if (!value) return fallback;
  if (!(decisionModes as readonly string[]).includes(value)) throw new OperatorConfigError(`DURABLE_HARNESS_DECISIONS must be "signed" or "trusted-network", got "${value}"`);
  return value as DecisionMode;
}
