/** The SQLite ledger: the shared Ledger contract, plus what is SQLite's own (file, WAL, schema version). */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { LEDGER_SCHEMA_VERSION, SqliteLedger } from '../../src/ledger/index.js';
import { approvalLedgerSuite } from './approval-ledger-suite.js';
import { describeLedgerContract } from './ledger-contract.js';

async function tempFile(): Promise<{ dir: string; file: string }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'dh-ledger-'));
  return { dir, file: path.join(dir, 'nested', 'deeper', 'ledger.db') };
}

describeLedgerContract('SqliteLedger', async () => {
  const { dir, file } = await tempFile();
  return { ledger: SqliteLedger.open(file), open: async () => SqliteLedger.open(file), cleanup: () => rm(dir, { recursive: true, force: true }) };
});

approvalLedgerSuite('SqliteLedger', async () => SqliteLedger.open(':memory:'));

describe('SqliteLedger on its own', () => {
  it('creates directories, uses WAL and records the schema version; reopening does not re-migrate', async () => {
    const { dir, file } = await tempFile();
    const ledger = SqliteLedger.open(file);
    expect(ledger.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    const raw = new Database(file, { readonly: true });
    expect(raw.pragma('journal_mode', { simple: true })).toBe('wal');
    raw.close();
    await ledger.close();
    const again = SqliteLedger.open(file);
    expect(again.schemaVersion).toBe(LEDGER_SCHEMA_VERSION);
    await again.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses a file from a newer schema', async () => {
    const { dir, file } = await tempFile();
    await SqliteLedger.open(file).close();
    const raw = new Database(file);
    raw.pragma(`user_version = ${LEDGER_SCHEMA_VERSION + 1}`);
    raw.close();
    expect(() => SqliteLedger.open(file)).toThrow(/newer than this code understands/);
    await rm(dir, { recursive: true, force: true });
  });
});
