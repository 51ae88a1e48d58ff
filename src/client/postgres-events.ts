/**
 * A run's events from the PostgreSQL ledger for a service on any host: one connection that LISTENs on the channel
 * the ledger NOTIFYs on every event insert, and reads the rows after the follower's cursor when woken. `pg` is
 * loaded only when this is called (install it beside the client: `npm install pg`); the client itself never
 * depends on it.
 */
import { EVENTS_CHANNEL, pause, type RunEventSource, type StoredEvent } from '../contracts/run-events.js';

/** The parts of `pg.Client` used here. */
interface PgClient {
  connect(): Promise<unknown>;
  query<R>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
  on(event: 'notification', listener: (n: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error' | 'end', listener: () => void): unknown;
  end(): Promise<void>;
}

interface EventRow {
  cursor: string;
  turn: number;
  type: string;
  data_json: string;
  at: Date | string;
}

/**
 * Follows runs in the PostgreSQL ledger at `connectionString` (the workers' DATABASE_URL, or a read-only role's: it
 * needs SELECT on `events` and nothing else). A lost connection is opened again at the next read; while it is down
 * a follower reads every `maxWaitMs`, so nothing is missed, only later.
 */
export async function postgresEventSource(connectionString: string): Promise<RunEventSource> {
  let pg: { default: { Client: new (options: { connectionString: string }) => PgClient } };
  try {
    pg = (await import('pg')) as typeof pg;
  } catch (e) {
    throw new Error(`following run events in PostgreSQL needs the "pg" package beside the client: npm install pg (${(e as Error).message})`, { cause: e });
  }
  let client: Promise<PgClient> | undefined;
  let closed = false;
  /** The runs this source has read: every insert in the database notifies, only these are kept. */
  const followed = new Set<string>();
  /** Followed runs notified since their last read (a notification between a read and its wait is not lost). */
  const notified = new Set<string>();
  const waiters = new Map<string, Set<() => void>>();
  const wake = (workflowId: string) => {
    if (!followed.has(workflowId)) return;
    notified.add(workflowId);
    for (const w of waiters.get(workflowId) ?? []) w();
  };
  const connected = (): Promise<PgClient> => {
    if (closed) return Promise.reject(new Error('the event source is closed'));
    client ??= (async () => {
      const c = new pg.default.Client({ connectionString });
      const lost = () => {
        client = undefined;
        // Whatever was notified while the connection was down is read at the next tick: wake every follower.
        for (const id of waiters.keys()) wake(id);
      };
      c.on('error', lost);
      c.on('end', lost);
      c.on('notification', (n) => {
        if (n.channel === EVENTS_CHANNEL && n.payload) wake(n.payload);
      });
      try {
        await c.connect();
        await c.query(`LISTEN ${EVENTS_CHANNEL}`);
      } catch (e) {
        client = undefined;
        await c.end().catch(() => undefined);
        throw e;
      }
      return c;
    })();
    return client;
  };
  await connected();
  return {
    delay: 'a PostgreSQL notification after the row commits (tens of milliseconds); a read every few seconds while disconnected',
    async read(workflowId, afterCursor, limit): Promise<StoredEvent[]> {
      followed.add(workflowId);
      notified.delete(workflowId);
      const c = await connected();
      const { rows } = await c.query<EventRow>(`SELECT cursor, turn, type, data_json, at FROM events WHERE workflow_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3`, [
        workflowId,
        afterCursor,
        limit,
      ]);
      return rows.map((r) => ({ cursor: Number(r.cursor), turn: r.turn, type: r.type, data: JSON.parse(r.data_json) as unknown, at: new Date(r.at).toISOString() }));
    },
    async wait(workflowId, _afterCursor, { signal, maxWaitMs }) {
      if (notified.has(workflowId)) return;
      const woken = new AbortController();
      const onAbort = () => woken.abort();
      signal.addEventListener('abort', onAbort, { once: true });
      const set = waiters.get(workflowId) ?? new Set();
      waiters.set(workflowId, set);
      const wakeUp = () => woken.abort();
      set.add(wakeUp);
      try {
        await pause(client ? maxWaitMs : Math.min(maxWaitMs, 1000), woken.signal);
      } finally {
        set.delete(wakeUp);
        if (set.size === 0) waiters.delete(workflowId);
        signal.removeEventListener('abort', onAbort);
      }
    },
    async close() {
      closed = true;
      const c = await client?.catch(() => undefined);
      client = undefined;
      await c?.end().catch(() => undefined);
    },
  };
}
