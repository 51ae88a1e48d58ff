/**
 * The compose topology, as an operator relies on it (CI also runs `docker-compose config -q`): Temporal on
 * PostgreSQL, the UI wired to the codec server, a separate ledger database, and a worker service that scales.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot } from '../support/worker.js';

interface Service {
  image?: string;
  command?: string[];
  environment?: Record<string, string | null>;
  ports?: string[];
  depends_on?: Record<string, { condition: string }>;
  deploy?: { replicas?: string | number };
  container_name?: string;
}
const compose = parse(readFileSync(path.join(repoRoot, 'docker-compose.yml'), 'utf8'), { merge: true }) as { services: Record<string, Service> };
const { services } = compose;

it('runs Temporal on PostgreSQL, the UI, the codec server, the ledger database and the workers', () => {
  expect(Object.keys(services)).toEqual(expect.arrayContaining(['postgresql', 'temporal', 'temporal-ui', 'codec-server', 'ledger-postgres', 'worker']));
  expect(services.temporal!.environment!.DB).toBe('postgres12');
  expect(services['ledger-postgres']!.image).toMatch(/^postgres:/);
});

it('the workers share the ledger database and scale without clashing', () => {
  const worker = services.worker!;
  expect(worker.environment!.DATABASE_URL).toMatch(/^postgres:\/\/[^@]+@ledger-postgres:5432\/ledger$/);
  expect(worker.depends_on!['ledger-postgres']).toEqual({ condition: 'service_healthy' });
  expect(worker.container_name).toBeUndefined();
  expect(worker.ports ?? []).toEqual([]);
  expect(String(worker.deploy?.replicas)).toMatch(/WORKER_REPLICAS/);
  expect(worker.environment!.DURABLE_HARNESS_PROMETHEUS_ADDRESS).toBe('0.0.0.0:9464');
});

it('the UI decodes through the codec server, which holds the same keys as the workers', () => {
  const ui = services['temporal-ui']!.environment!;
  const codec = services['codec-server']!;
  expect(ui.TEMPORAL_CODEC_ENDPOINT).toMatch(/DURABLE_HARNESS_CODEC_PUBLIC_URL/);
  // The worker image holds the compiled package only (docker/worker.Dockerfile): no tsx, no src/.
  expect(codec.command).toEqual(['node', 'dist/cli/main.js', 'codec-server']);
  expect(codec.environment!.DURABLE_HARNESS_PAYLOAD_KEYS).toBe(services.worker!.environment!.DURABLE_HARNESS_PAYLOAD_KEYS);
  expect(codec.environment!.DURABLE_HARNESS_CODEC_CORS_ORIGINS).toMatch(/http:\/\/localhost:8080/);
  expect(codec.ports).toEqual(['127.0.0.1:8234:8234']);
  // Nobody decodes without a token: the UI's is part of its endpoint, operators may add theirs.
  expect(codec.environment!.DURABLE_HARNESS_CODEC_TOKENS).toMatch(/^ui=\$\{DURABLE_HARNESS_CODEC_UI_TOKEN/);
});

it('the worker image runs the compiled package, its workflow code bundled at build time, with production dependencies only', () => {
  const dockerfile = readFileSync(path.join(repoRoot, 'docker', 'worker.Dockerfile'), 'utf8');
  const [build, runtime] = dockerfile.split(/^FROM /m).slice(1);
  expect(build).toMatch(/RUN npm run build \\\n && node docker\/bundle-workflows\.mjs \\\n && npm prune --omit=dev/);
  expect(runtime).toMatch(/^COPY --from=build \/app\/node_modules \.\/node_modules$/m);
  expect(runtime).toMatch(/^COPY --from=build \/app\/dist \.\/dist$/m);
  // The local sandbox's containment helper is compiled from its source on first use; runs on a repository need git.
  expect(runtime).toMatch(/^COPY native \.\/native$/m);
  expect(runtime).toMatch(/apt-get install -y --no-install-recommends [^\n]*\bgcc libc6-dev git\b/);
  expect(runtime).not.toMatch(/^COPY src/m);
  expect(runtime).toMatch(/^CMD \["node", "dist\/cli\/main\.js", "worker"\]$/m);
  expect(dockerfile).not.toMatch(/^(RUN|CMD|ENTRYPOINT).*tsx/m);
});
