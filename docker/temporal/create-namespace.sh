#!/bin/sh
# Creates the namespace the worker uses, once the server answers (run by compose in temporalio/admin-tools).
set -eu
ns="${DEFAULT_NAMESPACE:-default}"
addr="${TEMPORAL_ADDRESS:-temporal:7233}"
i=0
until temporal operator cluster health --address "$addr"; do
  i=$((i + 1)); [ "$i" -lt 60 ] || { echo "Temporal at $addr did not become healthy"; exit 1; }
  sleep 2
done
temporal operator namespace describe -n "$ns" --address "$addr" \
  || temporal operator namespace create -n "$ns" --retention 72h --address "$addr"
echo "namespace $ns ready"
