/** Adapters by driver class, so a catalog entry names its adapter and platform engineers can add their own. */
import { registerClaudeCode } from './claude-code-adapter.js';
import { registerCodex } from './codex-adapter.js';
import { registerGeminiCli } from './gemini-cli-adapter.js';
import { registerOpenCode } from './opencode-adapter.js';
import { registerPi } from './pi-adapter.js';
import { StdioJsonAdapter, stdioJsonDriverClass } from './stdio-json-adapter.js';
import type { AdapterFactory, HarnessAdapter } from './types.js';

/** Thrown when a catalog names a driver class nobody registered. */
export class UnknownDriverError extends Error {
  override readonly name = 'UnknownDriverError';
  /** Stable type for ApplicationFailure matching: retrying cannot help. */
  readonly type = 'UnknownDriver' as const;

  constructor(
    readonly driverClass: string,
    readonly registered: readonly string[],
  ) {
    const known = registered.length > 0 ? registered.join(', ') : '(none)';
    super(
      `No harness adapter is registered for driver class "${driverClass}". Registered: ${known}. ` +
        'Register one with AdapterRegistry.register(driverClass, factory), or fix `driverClass` in the catalog.',
    );
  }
}

/** A map from driver class to adapter factory. */
export class AdapterRegistry {
  private readonly factories = new Map<string, AdapterFactory>();

  /** Registers (or replaces) the factory for `driverClass`; returns the registry for chaining. */
  register(driverClass: string, factory: AdapterFactory): this {
    if (driverClass.trim() === '') throw new Error('A driver class name must not be empty.');
    this.factories.set(driverClass, factory);
    return this;
  }

  /** Whether `driverClass` is registered. */
  has(driverClass: string): boolean {
    return this.factories.has(driverClass);
  }

  /** Registered driver classes, sorted. */
  driverClasses(): string[] {
    return [...this.factories.keys()].sort();
  }

  /** A fresh adapter for `driverClass`; throws UnknownDriverError if none is registered. */
  create(driverClass: string): HarnessAdapter {
    const factory = this.factories.get(driverClass);
    if (!factory) throw new UnknownDriverError(driverClass, this.driverClasses());
    return factory();
  }
}

/** A registry with the built-in adapters: StdioJson and the five real CLIs. */
export function defaultAdapterRegistry(): AdapterRegistry {
  const registry = new AdapterRegistry().register(stdioJsonDriverClass, () => new StdioJsonAdapter());
  for (const register of [registerClaudeCode, registerCodex, registerGeminiCli, registerOpenCode, registerPi]) register(registry);
  return registry;
}
