# The durable-harness worker: the agentRun workflow and its activities, starting sandboxes on a Docker engine.
#   docker build -f docker/worker.Dockerfile -t durable-harness-worker:latest .
# It talks to the engine through DOCKER_HOST (compose mounts the host's /var/run/docker.sock), so sandbox
# containers are siblings of the worker, not nested. Runs as root: it needs the socket and chowns workspaces.
# It runs the compiled JavaScript with the workflow code bundled at build time: no tsx, no webpack at start.

# Build: every dependency (from the npm registry), the compiled package, the workflow bundles; then the dev
# dependencies are pruned, so what the runtime stage copies is production only.
FROM node:20-bookworm-slim AS build
# better-sqlite3 falls back to a source build when no prebuilt binary matches.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY docker/bundle-workflows.mjs ./docker/
RUN npm run build \
 && node docker/bundle-workflows.mjs \
 && npm prune --omit=dev --no-audit --no-fund \
 && npm cache clean --force

# gcc and libc6-dev: the local sandbox compiles its containment helper (native/dh-contain.c) on first use; git: runs on a
# repository (docs/repositories.md) check out, commit and push with the worker's own git.
FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini gcc libc6-dev git \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY config ./config
COPY harnesses ./harnesses
COPY native ./native
ENV NODE_ENV=production \
    DURABLE_HARNESS_DATA=/var/lib/durable-harness
VOLUME ["/var/lib/durable-harness"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "dist/cli/main.js", "worker"]
