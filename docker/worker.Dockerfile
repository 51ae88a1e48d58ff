# The durable-harness worker: the agentRun workflow and its activities, starting sandboxes on a Docker engine.
#   docker build -f docker/worker.Dockerfile -t durable-harness-worker:latest .
# It talks to the engine through DOCKER_HOST (compose mounts the host's /var/run/docker.sock), so sandbox
# containers are siblings of the worker, not nested. Runs as root: it needs the socket and chowns workspaces.
FROM node:20-bookworm-slim AS deps
# better-sqlite3 falls back to a source build when no prebuilt binary matches.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund && npm cache clean --force

FROM node:20-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json package-lock.json tsconfig.json ./
COPY bin ./bin
COPY src ./src
COPY config ./config
COPY harnesses ./harnesses
ENV NODE_ENV=production \
    DURABLE_HARNESS_DATA=/var/lib/durable-harness
VOLUME ["/var/lib/durable-harness"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["npx", "tsx", "src/cli/main.ts", "worker"]
