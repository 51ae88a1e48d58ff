/**
 * What a bench level asked of the Temporal server, from its Prometheus counters (`startDevServer({ metricsPort })`):
 * the frontend's RPCs and the persistence operations of all its services, by operation. Beside the bare wrapper's,
 * per turn, they say where the server's CPU goes (issue 22): a write the wrapper does not make is a cost to justify.
 */

/** Counter totals by `rpc <Operation>` (frontend requests) and `db <Operation>` (persistence, every service). */
export type RequestCounts = Record<string, number>;

/**
 * Operations the server repeats on its own clock (cluster metadata, the namespace registry, membership, task-queue
 * leases and ack levels): they grow with a level's wall time and with the queues it touches, not with its turns, so
 * they are left out. Polls are not: a long poll that ends empty counts like one that brought a task.
 */
const periodic = new Set([
  'GetCurrentClusterMetadata',
  'GetClusterMetadata',
  'ListClusterMetadata',
  'GetNamespace',
  'ListNamespaces',
  'GetMetadata',
  'GetClusterMembers',
  'UpsertClusterMembership',
  'PruneClusterMembership',
  'GetTaskQueue',
  'UpdateTaskQueue',
]);

const counterLine = /^(service_requests|persistence_requests)\{([^}]*)\}\s+([0-9.eE+-]+)$/;

/** The server's request counters now. */
export async function serverRequests(metricsUrl: string): Promise<RequestCounts> {
  const text = await (await fetch(metricsUrl, { signal: AbortSignal.timeout(5000) })).text();
  const counts: RequestCounts = {};
  for (const line of text.split('\n')) {
    const m = counterLine.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...m[2]!.matchAll(/(\w+)="([^"]*)"/g)].map(([, k, v]) => [k, v]));
    // Every RPC passes the frontend; history's and matching's own `service_requests` repeat it inside the server.
    if (m[1] === 'service_requests' && labels.service_name !== 'frontend') continue;
    if (m[1] === 'persistence_requests' && periodic.has(labels.operation ?? '')) continue;
    const key = `${m[1] === 'service_requests' ? 'rpc' : 'db'} ${labels.operation ?? '?'}`;
    counts[key] = (counts[key] ?? 0) + Number(m[3]);
  }
  return counts;
}

/** `after - before`, divided by `turns`: the requests per turn of what ran in between. */
export function requestsPerTurn(before: RequestCounts, after: RequestCounts, turns: number): RequestCounts {
  const out: RequestCounts = {};
  for (const [key, n] of Object.entries(after)) {
    const d = n - (before[key] ?? 0);
    if (d > 0) out[key] = d / Math.max(1, turns);
  }
  return out;
}

/**
 * The operations where the project and the bare wrapper differ by at least `minDiff` per turn, largest difference
 * first, as markdown lines; the totals of each kind first.
 */
export function requestsTable(project: RequestCounts, bare: RequestCounts, minDiff = 0.05): string[] {
  const total = (c: RequestCounts, kind: string) => Object.entries(c).filter(([k]) => k.startsWith(`${kind} `)).reduce((a, [, n]) => a + n, 0);
  const f = (x: number) => x.toFixed(2);
  const lines = ['| per turn | project | bare wrapper | difference |', '| --- | ---: | ---: | ---: |'];
  for (const kind of ['rpc', 'db']) lines.push(`| all ${kind === 'rpc' ? 'RPCs' : 'persistence operations'} | ${f(total(project, kind))} | ${f(total(bare, kind))} | ${f(total(project, kind) - total(bare, kind))} |`);
  const keys = [...new Set([...Object.keys(project), ...Object.keys(bare)])]
    .map((k) => ({ k, p: project[k] ?? 0, b: bare[k] ?? 0 }))
    .filter(({ p, b }) => Math.abs(p - b) >= minDiff)
    .sort((x, y) => Math.abs(y.p - y.b) - Math.abs(x.p - x.b));
  for (const { k, p, b } of keys) lines.push(`| ${k} | ${f(p)} | ${f(b)} | ${p - b >= 0 ? '+' : ''}${f(p - b)} |`);
  return lines;
}
