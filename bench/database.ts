/**
 * A PostgreSQL schema of its own for one bench part, dropped afterwards: on DATABASE_URL or
 * DURABLE_HARNESS_TEST_DATABASE_URL when set, else on a scratch cluster started for the bench.
 */
import pg from 'pg';
import { withSearchPath } from '../test/support/postgres.js';
import { startScratchPostgres } from '../test/support/scratch-postgres.js';

export async function benchDatabase(label: string): Promise<{ url: string; stop(): Promise<void> }> {
  const external = process.env.DATABASE_URL?.trim() || process.env.DURABLE_HARNESS_TEST_DATABASE_URL?.trim();
  const scratch = external ? undefined : await startScratchPostgres();
  const base = external ?? scratch!.url;
  const schema = `bench_${label}_${Date.now().toString(36)}`;
  const admin = new pg.Pool({ connectionString: base, max: 1 });
  await admin.query(`CREATE SCHEMA ${schema}`);
  return {
    url: withSearchPath(base, schema),
    async stop() {
      await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
      await admin.end();
      await scratch?.stop();
    },
  };
}
