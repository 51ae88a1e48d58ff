/** Picks the ledger: PostgreSQL when DATABASE_URL is set (shared by many workers), else SQLite in the data dir. */
import path from 'node:path';
import { PostgresLedger, redactDatabaseUrl } from './postgres-ledger.js';
import { SqliteLedger } from './sqlite-ledger.js';
import type { Ledger } from './types.js';

type Env = Readonly<Record<string, string | undefined>>;

/** Raised for a DATABASE_URL that cannot be a PostgreSQL URL; the message hides the password. */
export class LedgerConfigError extends Error {
  override readonly name = 'LedgerConfigError';
}

/** Where the ledger lives, for log lines (password hidden). */
export function describeLedger(env: Env, dataDir: string): string {
  const url = env.DATABASE_URL?.trim();
  return url ? `PostgreSQL ${redactDatabaseUrl(url)}` : `SQLite ${path.join(dataDir, 'ledger.sqlite')}`;
}

/** DATABASE_URL when it is set (a LedgerConfigError unless it is a PostgreSQL URL), else undefined: the SQLite ledger. */
export function postgresUrlOf(env: Env): string | undefined {
  const url = env.DATABASE_URL?.trim();
  if (url && !/^postgres(ql)?:\/\//.test(url)) throw new LedgerConfigError(`DATABASE_URL must be a postgres:// or postgresql:// URL, got ${redactDatabaseUrl(url)}`);
  return url || undefined;
}

/**
 * Opens the ledger the environment selects. PostgreSQL migrates in the background; `await ledgerReady(ledger)`
 * to fail fast on a wrong URL.
 */
export function openLedger(env: Env, dataDir: string): Ledger {
  const url = postgresUrlOf(env);
  if (!url) return SqliteLedger.open(path.join(dataDir, 'ledger.sqlite'));
  const pool = env.DATABASE_POOL_SIZE ? Number(env.DATABASE_POOL_SIZE) : undefined;
  if (pool !== undefined && !(Number.isInteger(pool) && pool > 0)) throw new LedgerConfigError(`DATABASE_POOL_SIZE="${env.DATABASE_POOL_SIZE}" must be a positive whole number`);
  return PostgresLedger.open({ connectionString: url, maxConnections: pool });
}

/** Waits until a ledger can take writes (PostgreSQL: connected and migrated). */
export async function ledgerReady(ledger: Ledger): Promise<void> {
  if (ledger instanceof PostgresLedger) await ledger.ready;
}
