// One list of failure types (src/contracts/failures.ts): every stable type src/ throws is in it, so `run` and
// `status` exit 2 for every configuration failure and no list can drift from another.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { exitCodeForResult, ExitCodes } from '../../src/cli/exit-codes.js';
import { failureTypes, isConfigurationFailure } from '../../src/contracts/failures.js';

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

/** Every failure type named as a literal where src/ throws or codes an error. */
function thrownTypes(): Map<string, string> {
  const found = new Map<string, string>();
  const patterns = [
    /\btype: '([A-Z][A-Za-z]+)'/g, // ApplicationFailure.create({ type: 'X' })
    /\b(?:readonly )?(?:code|type) = '([A-Z][A-Za-z]+)'/g, // error classes: readonly code = 'X'
    /nonRetryableErrorTypes: \[([^\]]*)\]/g,
    /^\s+[a-z]+: '(Decision[A-Za-z]+)',$/gm, // the decision refusal table
    /^\s+([A-Z][A-Za-z]+): '\1',$/gm, // code tables: { DockerUnavailable: 'DockerUnavailable' }
    /export type LedgerFaultCode = ([^;]+);/g,
  ];
  for (const file of sources('src')) {
    const text = readFileSync(file, 'utf8');
    for (const pattern of patterns) {
      for (const m of text.matchAll(pattern)) {
        for (const name of m[1]!.match(/[A-Z][A-Za-z]+/g) ?? []) found.set(name, file);
      }
    }
  }
  return found;
}

describe('failure types', () => {
  it('are all in the one list', () => {
    const missing = [...thrownTypes()].filter(([type]) => !Object.hasOwn(failureTypes, type)).map(([type, file]) => `${type} (${file})`);
    expect(missing).toEqual([]);
    // The scan itself finds what it should: a change to how types are written must not make it see nothing.
    expect(thrownTypes().size).toBeGreaterThan(25);
  });

  it('exit 2 from `run` and `status` when they are configuration failures, 10 otherwise', () => {
    for (const type of ['CatalogInvalid', 'LedgerReadOnly', 'LedgerReplaced', 'LedgerMissing', 'CatalogMismatch', 'HarnessBinaryMissing']) {
      expect(isConfigurationFailure(type)).toBe(true);
      expect(exitCodeForResult({ status: 'failed', failureType: type })).toBe(ExitCodes.usage);
    }
    for (const type of ['TurnFailed', 'LedgerUnavailable', 'DockerUnavailable', 'SomethingNobodyListed', undefined]) {
      expect(exitCodeForResult({ status: 'failed', failureType: type })).toBe(ExitCodes.failed);
    }
  });
});
