# The real sandbox image: Node 20 and the pinned harness CLIs, run as a non-root user.
# Needs the internet (a base image and npm); CI builds an offline stand-in with scripts/build-sandbox-image.sh.
#   docker build -f docker/sandbox.Dockerfile -t durable-harness-sandbox:latest .
# The provider runs it locked down: --cap-drop ALL, no-new-privileges, read-only root with a tmpfs /tmp,
# the run's workspace bind-mounted at /workspace (HOME=/workspace/.home), and `sleep infinity` as main process.
FROM node:20-bookworm-slim

# Tools the CLIs shell out to (git, ripgrep), ps/kill for the provider's in-container kill, CA certificates
# for the vendor APIs.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git ripgrep procps \
 && rm -rf /var/lib/apt/lists/*

# The CLIs pinned by test/e2e/clis (their JSON formats change between releases): same lockfile as the tests.
WORKDIR /opt/clis
COPY test/e2e/clis/package.json test/e2e/clis/package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin:/opt/clis/node_modules/.bin:/opt/clis/bin

# The bundled stdio-JSON demo harness (no dependencies).
COPY harnesses /opt/durable-harness/harnesses

# The node image's `node` user is uid 1000, the provider's default sandbox user.
RUN mkdir -p /workspace && chown 1000:1000 /workspace
USER 1000:1000
WORKDIR /workspace
ENV HOME=/workspace/.home \
    DISABLE_AUTOUPDATER=1 \
    OPENCODE_DISABLE_AUTOUPDATE=1 \
    PI_OFFLINE=1
CMD ["sleep", "infinity"]
