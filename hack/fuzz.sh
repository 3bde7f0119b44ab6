#!/usr/bin/env bash
# Runs every Go fuzz target of the module for the given time each (default 15s).
# Seed corpora also run in `make test-unit`; this explores beyond them.
set -euo pipefail
t=${1:-15s}
cd "$(dirname "$0")/.."
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "== $pkg $target ($t)" >&2
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg"
  done
done
