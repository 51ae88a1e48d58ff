/** Drivers by driver class, so a catalog entry names its driver and platform engineers can add their own. */
import { claudeCode } from './claude-code-adapter.js';
import { codex } from './codex-adapter.js';
import type { HarnessDriver } from './driver.js';
import { geminiCli } from './gemini-cli-adapter.js';
import { openCode } from './opencode-adapter.js';
import { pi } from './pi-adapter.js';
import { stdioJson } from './stdio-json-adapter.js';

/** The built-in drivers: stdio-JSON and the five real CLIs. */
export const builtinDrivers: readonly HarnessDriver[] = [stdioJson, claudeCode, codex, geminiCli, openCode, pi];

/** Drivers by driver class. */
export type DriverRegistry = ReadonlyMap<string, HarnessDriver>;

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
      `No harness driver is registered for driver class "${driverClass}". Registered: ${known}. ` +
        'Add one with driverRegistry([...builtinDrivers, yourDriver]), or fix `driverClass` in the catalog.',
    );
  }
}

/** A registry of `drivers` (a later one replaces an earlier one of the same class). */
export function driverRegistry(drivers: Iterable<HarnessDriver>): DriverRegistry {
  const map = new Map<string, HarnessDriver>();
  for (const driver of drivers) {
    if (driver.driverClass.trim() === '') throw new Error('A driver class name must not be empty.');
    map.set(driver.driverClass, driver);
  }
  return map;
}

/** The driver for `driverClass`; throws UnknownDriverError if none is registered. */
export function findDriver(registry: DriverRegistry, driverClass: string): HarnessDriver {
  const driver = registry.get(driverClass);
  if (!driver) throw new UnknownDriverError(driverClass, [...registry.keys()].sort());
  return driver;
}

/** The registry the worker uses by default: the built-in drivers. */
export function defaultAdapterRegistry(): DriverRegistry {
  return driverRegistry(builtinDrivers);
}

/** The worker's name for a driver registry. */
export type AdapterRegistry = DriverRegistry;
