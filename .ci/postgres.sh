#!/usr/bin/env bash
# Installs (if needed) Debian's PostgreSQL and starts one scratch cluster for the test run, without systemd,
# as the `postgres` user, on 127.0.0.1 only; prints the URL the ledger tests use.
# Idempotent: a cluster already answering in PG_DIR is reused. Usage: eval "$(.ci/postgres.sh)"
# Log lines go to stderr so that stdout is only the export line.
set -euo pipefail

PG_DIR="${PG_DIR:-/tmp/dh-ci-postgres}"
PG_PORT="${PG_PORT:-55432}"
URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
log() { echo "postgres: $*" >&2; }

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

if [ -z "$(bindir)" ] || [ ! -x "$(bindir)/initdb" ]; then
  log "installing postgresql from apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends postgresql >&2
fi
BIN="$(bindir)"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

answers() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; }

if ! answers; then
  if [ ! -f "$PG_DIR/data/PG_VERSION" ]; then
    rm -rf "$PG_DIR"
    mkdir -p "$PG_DIR"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_DIR"
    log "initdb in $PG_DIR/data"
    as_pg "$BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust --encoding=UTF8 --locale=C --no-sync >&2
  fi
  log "starting on 127.0.0.1:$PG_PORT (log: $PG_DIR/server.log)"
  as_pg "$BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=300" start >&2 \
    || { tail -n 30 "$PG_DIR/server.log" >&2 || true; exit 1; }
fi
answers || { log "PostgreSQL does not answer on 127.0.0.1:$PG_PORT"; exit 1; }
log "up: $URL"
echo "export DURABLE_HARNESS_TEST_DATABASE_URL=$URL"
