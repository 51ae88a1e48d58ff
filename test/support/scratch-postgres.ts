/**
 * A throwaway PostgreSQL cluster under a temporary directory (initdb + pg_ctl from Debian's `postgresql` package),
 * for tests and benchmarks on a machine with no database running. As root it runs the server as the `postgres`
 * user (PostgreSQL refuses to run as root). It listens on 127.0.0.1 only, with trust auth, fsync off.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../src/temporal/dev-server.js';

export interface ScratchPostgres {
  /** postgres://postgres@127.0.0.1:PORT/postgres */
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  /** A URL for another database on this cluster (created if missing). */
  database(name: string): Promise<string>;
  stop(): Promise<void>;
}

export const postgresInstallHint = 'Install PostgreSQL (Debian: `apt-get install -y postgresql`); .ci/run does this on CI.';

/** The directory holding initdb and pg_ctl, newest major version first; undefined when PostgreSQL is not installed. */
export function findPostgresBinDir(env: Readonly<Record<string, string | undefined>> = process.env): string | undefined {
  if (env.PG_BIN_DIR && existsSync(path.join(env.PG_BIN_DIR, 'initdb'))) return env.PG_BIN_DIR;
  const root = '/usr/lib/postgresql';
  if (existsSync(root)) {
    const versions = readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
    for (const v of versions) if (existsSync(path.join(root, v, 'bin', 'initdb'))) return path.join(root, v, 'bin');
  }
  const which = spawnSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' });
  return which.status === 0 ? path.dirname(which.stdout.trim()) : undefined;
}

/** Starts a fresh cluster; throws (with the install hint) when PostgreSQL is missing. */
export async function startScratchPostgres(options: { port?: number } = {}): Promise<ScratchPostgres> {
  const bin = findPostgresBinDir();
  if (!bin) throw new Error(`PostgreSQL is not installed: no initdb found. ${postgresInstallHint}`);
  const asRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'dh-pg-'));
  const data = path.join(dir, 'data');
  const log = path.join(dir, 'server.log');
  let uid: number | undefined;
  if (asRoot) {
    uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  const run = (cmd: string, args: string[]) => {
    const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', path.join(bin, cmd), ...args]] : [path.join(bin, cmd), args];
    const result = spawnSync(file, argv, { encoding: 'utf8', cwd: dir });
    if (result.status !== 0) {
      const serverLog = existsSync(log) ? readFileSync(log, 'utf8').slice(-2000) : '';
      throw new Error(`${cmd} failed (${result.status ?? result.signal}): ${(result.stderr || result.stdout).trim()}\n${serverLog}`);
    }
  };
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--locale=C', '--no-sync']);
  const port = options.port ?? (await freePort());
  const settings = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200`;
  run('pg_ctl', ['-D', data, '-o', settings, '-l', log, '-w', '-t', '60', 'start']);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let stopped = false;
  return {
    url,
    port,
    dir,
    async database(name) {
      if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`database name "${name}" must be lower-case letters, digits and _`);
      const { default: pg } = await import('pg');
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      try {
        const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
        if (exists.rowCount === 0) await client.query(`CREATE DATABASE ${name}`);
      } finally {
        await client.end();
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      try {
        run('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
