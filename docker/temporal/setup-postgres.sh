#!/bin/sh
# One-shot schema setup for Temporal on PostgreSQL (run by compose in temporalio/admin-tools). Idempotent:
# `create` fails harmlessly when the database exists; update-schema applies only missing versions.
set -eu
ep="${POSTGRES_SEEDS:-postgresql}"
port="${DB_PORT:-5432}"
user="${POSTGRES_USER:-temporal}"
export SQL_PASSWORD="${POSTGRES_PWD:-temporal}"
until nc -z "$ep" "$port"; do echo "waiting for $ep:$port"; sleep 1; done
for db in temporal temporal_visibility; do
  case "$db" in temporal) dir=temporal ;; *) dir=visibility ;; esac
  temporal-sql-tool --plugin postgres12 --ep "$ep" -u "$user" -p "$port" --db "$db" create || true
  temporal-sql-tool --plugin postgres12 --ep "$ep" -u "$user" -p "$port" --db "$db" setup-schema -v 0.0 || true
  temporal-sql-tool --plugin postgres12 --ep "$ep" -u "$user" -p "$port" --db "$db" \
    update-schema -d "/etc/temporal/schema/postgresql/v12/$dir/versioned"
done
echo "PostgreSQL schema ready"
