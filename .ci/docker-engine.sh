#!/usr/bin/env bash
# Installs (if needed) and starts a Docker engine without systemd, then prints the DOCKER_HOST to use.
# Idempotent: a running engine on the socket is reused. Usage: eval "$(.ci/docker-engine.sh)"
# Log lines go to stderr so that stdout is only the export line.
set -euo pipefail

DOCKERD_DIR="${DOCKERD_DIR:-/tmp/dockerd}"
SOCK="$DOCKERD_DIR/docker.sock"
HOST="unix://$SOCK"
log() { echo "docker-engine: $*" >&2; }

answers() { DOCKER_HOST="$HOST" docker info >/dev/null 2>&1; }

if answers; then
  log "engine already answers on $HOST"
  echo "export DOCKER_HOST=$HOST"
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  log "installing docker.io from apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends docker.io >&2
fi

mkdir -p "$DOCKERD_DIR/data" "$DOCKERD_DIR/exec"
# A stale pidfile or socket from a killed engine keeps dockerd from starting.
if [ -f "$DOCKERD_DIR/dockerd.pid" ] && ! kill -0 "$(cat "$DOCKERD_DIR/dockerd.pid")" 2>/dev/null; then
  rm -f "$DOCKERD_DIR/dockerd.pid"
fi
if [ ! -f "$DOCKERD_DIR/dockerd.pid" ]; then
  rm -f "$SOCK"
  log "starting dockerd (log: $DOCKERD_DIR/dockerd.log)"
  # No bridge and no iptables: these machines have neither; containers get 'none' or host networking.
  nohup setsid dockerd \
    --data-root="$DOCKERD_DIR/data" \
    --exec-root="$DOCKERD_DIR/exec" \
    --pidfile="$DOCKERD_DIR/dockerd.pid" \
    --host="$HOST" \
    --storage-driver=overlay2 \
    --bridge=none \
    --iptables=false \
    >"$DOCKERD_DIR/dockerd.log" 2>&1 </dev/null &
fi

for _ in $(seq 1 150); do
  if answers; then
    log "engine up on $HOST"
    echo "export DOCKER_HOST=$HOST"
    exit 0
  fi
  sleep 0.2
done
log "dockerd did not answer within 30 s; last log lines:"
tail -n 30 "$DOCKERD_DIR/dockerd.log" >&2 || true
exit 1
