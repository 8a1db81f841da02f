#!/usr/bin/env bash
# Build the venvs the agent-framework interop tests drive (tests/interop/test_interop_{adk,strands,beeai}.py):
# .cache/frameworks/<set>/ from tests/support/frameworks/<set>.txt, every package at the version its
# <set>.lock pins. The frameworks pin a2a-sdk versions the server's own venv cannot hold (strands-agents and
# beeai-framework need a2a-sdk < 0.4), so each set has a venv of its own. A no-op when a venv was built from
# the same files; fails (never skips) when pip cannot install them.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SETS="$ROOT/tests/support/frameworks"
DIR="${FRAMEWORKS_DIR:-$ROOT/.cache/frameworks}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
mkdir -p "$DIR"

exec 9>"$DIR/.lock"
flock 9
for want in "$SETS"/*.txt; do
  name="$(basename "$want" .txt)"
  lock="$SETS/$name.lock"
  venv="$DIR/$name"
  stamp="$(cat "$want" "$lock" | sha256sum | cut -c1-16)"
  [ "$(cat "$venv/.built" 2>/dev/null)" = "$stamp" ] && continue
  echo "install-frameworks: building $name"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  # pip's output only when it fails (a machine's own index settings can make it chatty).
  if ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$want" -c "$lock" >"$DIR/$name.log" 2>&1; then
    cat "$DIR/$name.log" >&2
    echo "install-frameworks: pip could not install $name" >&2
    exit 1
  fi
  echo "$stamp" >"$venv/.built"
done
