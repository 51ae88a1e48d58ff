/** Credential resolution: grants first, then the server's environment, then the vendor-key fallback. */
import { readFileSync, statSync } from 'node:fs';
import type { AgentConfig, HarnessConfig } from '../catalog/schema.js';

/** Where secret values are kept, by name. */
export interface CredentialStore {
  get(name: string): string | undefined;
  /** Every value held, so the runtime can redact any of them wherever it appears (optional). */
  values?(): readonly string[];
}

/** Minimal logger: only warnings are needed, and they never carry secret values. */
export interface CredentialLog {
  warn(message: string): void;
}

/** Raised when a grant cannot be satisfied; `code` is stable for ApplicationFailure types. */
export class CredentialMissingError extends Error {
  override readonly name = 'CredentialMissingError';
  readonly code = 'CredentialMissing' as const;
}

/** A store held in memory (tests, or secrets loaded by the embedding service). */
export class MemoryCredentialStore implements CredentialStore {
  private readonly entries: Map<string, string>;

  constructor(values: Readonly<Record<string, string>> = {}) {
    this.entries = new Map(Object.entries(values));
  }

  get(name: string): string | undefined {
    return this.entries.get(name);
  }

  values(): string[] {
    return [...this.entries.values()];
  }

  /** Adds or replaces a value. */
  set(name: string, value: string): void {
    this.entries.set(name, value);
  }
}

/** A JSON file `{ "NAME": "value" }`, read once; warns when group or others can read it. */
export class JsonFileCredentialStore implements CredentialStore {
  private readonly entries: Readonly<Record<string, string>>;

  constructor(
    readonly file: string,
    log: CredentialLog = console,
  ) {
    const mode = statSync(file).mode;
    if ((mode & 0o077) !== 0) {
      log.warn(
        `credential file ${file} is readable by group or others (mode ${(mode & 0o777).toString(8)}); run: chmod 600 ${file}`,
      );
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      // Never echo the content: it is full of secrets.
      throw new Error(`credential file ${file} is not valid JSON (${e instanceof SyntaxError ? 'syntax error' : String(e)})`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new Error(`credential file ${file} must hold a JSON object of name → value`);
    }
    const values: Record<string, string> = {};
    for (const [name, value] of Object.entries(parsed)) {
      if (typeof value !== 'string') throw new Error(`credential file ${file}: "${name}" must be a string`);
      values[name] = value;
    }
    this.entries = values;
  }

  get(name: string): string | undefined {
    return Object.prototype.hasOwnProperty.call(this.entries, name) ? this.entries[name] : undefined;
  }

  values(): string[] {
    return Object.values(this.entries);
  }
}

/** Where one variable of the harness environment came from. */
export interface CredentialSource {
  readonly env: string;
  readonly source: 'store' | 'env' | 'vendor-fallback';
}

/** What reaches the harness process: its environment, the values to redact, and an audit of sources. */
export interface ResolvedCredentials {
  readonly env: Record<string, string>;
  readonly secrets: string[];
  readonly sources: CredentialSource[];
}

export interface ResolveCredentialsInput {
  readonly agent: Pick<AgentConfig, 'name' | 'credentials'>;
  readonly harness: Pick<HarnessConfig, 'name' | 'driverClass' | 'apiKeyEnv'> & { readonly env?: Readonly<Record<string, string>> };
  readonly store?: CredentialStore;
  /** The server's environment (usually process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly log?: CredentialLog;
}

/** The server variable consulted when an agent has no grants: `AI_VENDOR_API_KEY__<DRIVERCLASS>`. */
export function vendorFallbackVariable(driverClass: string): string {
  return `AI_VENDOR_API_KEY__${driverClass.toUpperCase()}`;
}

function present(value: string | undefined): value is string {
  return value !== undefined && value !== '';
}

/** Resolves the agent's credentials into harness environment; throws CredentialMissingError for an unmet grant. */
export function resolveCredentials(input: ResolveCredentialsInput): ResolvedCredentials {
  const serverEnv = input.env ?? {};
  const env: Record<string, string> = {};
  const sources: CredentialSource[] = [];
  const grants = input.agent.credentials ?? [];

  for (const grant of grants) {
    const key = grant.from ?? grant.env;
    const stored = input.store?.get(key);
    if (present(stored)) {
      env[grant.env] = stored;
      sources.push({ env: grant.env, source: 'store' });
      continue;
    }
    const fromEnv = serverEnv[key];
    if (present(fromEnv)) {
      env[grant.env] = fromEnv;
      sources.push({ env: grant.env, source: 'env' });
      continue;
    }
    throw new CredentialMissingError(
      `agent "${input.agent.name}" is granted ${grant.env}${grant.from ? ` (from "${grant.from}")` : ''}, ` +
        `but "${key}" is neither in the credential store nor set in the server environment; ` +
        `set the server environment variable ${key} or add "${key}" to the credential store`,
    );
  }

  if (grants.length === 0 && input.harness.apiKeyEnv) {
    const variable = vendorFallbackVariable(input.harness.driverClass);
    const value = serverEnv[variable];
    if (present(value)) {
      env[input.harness.apiKeyEnv] = value;
      sources.push({ env: input.harness.apiKeyEnv, source: 'vendor-fallback' });
      // Logged because the agent now holds a process-wide key it was never explicitly granted.
      input.log?.warn(
        `agent "${input.agent.name}" has no credential grants; harness "${input.harness.name}" gets ` +
          `${input.harness.apiKeyEnv} from the server variable ${variable} (vendor-key fallback)`,
      );
    }
  }

  // A harness that names its key variable cannot work without it: say which grant to add now, instead of
  // starting it keyless and failing every attempt.
  const keyEnv = input.harness.apiKeyEnv;
  if (keyEnv && !present(env[keyEnv]) && !present(input.harness.env?.[keyEnv])) {
    const grant = `credentials: [{ env: ${keyEnv}, from: <NAME> }]`;
    const where = `where <NAME> is a key in the credential store or a server environment variable`;
    throw new CredentialMissingError(
      grants.length > 0
        ? `harness "${input.harness.name}" takes its key from ${keyEnv} (apiKeyEnv), but agent "${input.agent.name}" has no grant for ${keyEnv}; ` +
            `add ${grant} to agent "${input.agent.name}" in the catalog, ${where}`
        : `harness "${input.harness.name}" takes its key from ${keyEnv} (apiKeyEnv), but agent "${input.agent.name}" has no credential grants ` +
            `and the vendor-key fallback ${vendorFallbackVariable(input.harness.driverClass)} is not set on the worker; ` +
            `add ${grant} to agent "${input.agent.name}" in the catalog (${where}), or set ${vendorFallbackVariable(input.harness.driverClass)}`,
    );
  }

  return { env, secrets: [...new Set(Object.values(env))], sources };
}
