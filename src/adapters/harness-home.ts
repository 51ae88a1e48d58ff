/**
 * The per-run home a CLI adapter gives its harness: `<workspace>/.home/<dir>`, never the worker's real home.
 * Config files are written on the host side; the harness is pointed at the same directory as it sees it.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { HarnessSessionConfig } from './types.js';

/** One directory as seen from the worker (`host`) and from inside the sandbox (`sandbox`). */
export interface HarnessHome {
  readonly host: string;
  readonly sandbox: string;
}

/** The per-run home for one driver inside the workspace. */
export function harnessHome(config: HarnessSessionConfig, dir: string): HarnessHome {
  return {
    host: path.join(config.hostWorkspacePath, '.home', dir),
    // The sandbox path uses POSIX separators: it is the path inside the (Linux) sandbox.
    sandbox: path.posix.join(config.workspacePath, '.home', dir),
  };
}

/** A path below a home, on both sides. */
export function homePath(home: HarnessHome, ...segments: string[]): HarnessHome {
  return { host: path.join(home.host, ...segments), sandbox: path.posix.join(home.sandbox, ...segments) };
}

/** Writes a file below a home (creating directories); private to the run's user. */
export function writeHomeFile(file: HarnessHome, content: string): void {
  mkdirSync(path.dirname(file.host), { recursive: true, mode: 0o700 });
  writeFileSync(file.host, content, { mode: 0o600 });
}

/** A string setting from the catalog's driver-specific `settings`, if present. */
export function stringSetting(config: HarnessSessionConfig, key: string): string | undefined {
  const value = config.settings?.[key];
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/** A numeric setting from the catalog's driver-specific `settings`, if present. */
export function numberSetting(config: HarnessSessionConfig, key: string): number | undefined {
  const value = config.settings?.[key];
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/** Parses one line as JSON; `undefined` when it is not JSON (the caller maps it to an `unknown` event). */
export function parseJsonLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}
