/**
 * PostgreSQL for tests: the server named by DURABLE_HARNESS_TEST_DATABASE_URL, else a scratch cluster started
 * here (Debian's postgresql package; .ci/run installs it). No PostgreSQL is a test FAILURE, never a skip.
 * Each test gets its own schema, so tests never see each other's rows.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { startScratchPostgres, type ScratchPostgres } from './scratch-postgres.js';

export interface TestPostgres {
  readonly url: string;
  /** Creates an empty schema and returns a URL whose search_path is it. */
  freshSchema(label?: string): Promise<{ url: string; schema: string; drop(): Promise<void> }>;
  /** Runs one statement as the server's superuser. */
  admin(sql: string, values?: unknown[]): Promise<pg.QueryResult>;
  stop(): Promise<void>;
}

/** The URL with `search_path` set to `schema` for every connection made from it. */
export function withSearchPath(url: string, schema: string): string {
  const u = new URL(url);
  u.searchParams.set('options', `-c search_path=${schema}`);
  return u.toString();
}

export async function startTestPostgres(): Promise<TestPostgres> {
  const external = process.env.DURABLE_HARNESS_TEST_DATABASE_URL?.trim();
  let scratch: ScratchPostgres | undefined;
  const url = external || (scratch = await startScratchPostgres()).url;
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  admin.on('error', () => undefined);
  return {
    url,
    admin: (sql, values) => admin.query(sql, values),
    async freshSchema(label = 'test') {
      const schema = `${label.replace(/[^a-z0-9_]/g, '_')}_${randomUUID().replace(/-/g, '').slice(0, 12)}`;
      await admin.query(`CREATE SCHEMA ${schema}`);
      return { url: withSearchPath(url, schema), schema, drop: async () => void (await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)) };
    },
    async stop() {
      await admin.end();
      await scratch?.stop();
    },
  };
}
