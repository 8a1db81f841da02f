#!/usr/bin/env bash
# Install the pinned coding-agent CLIs the tests run for real into .cache/cli/node_modules (gitignored).
# Skips npm when every package is already there at its pinned version; fails (never skips) when npm cannot
# install them, so a CI without the registry fails loudly instead of silently not testing the CLIs.
# Add a CLI: one "package@version" line in PACKAGES. Versions are exact: event shapes change between releases.
set -euo pipefail

PACKAGES=(
  "@anthropic-ai/claude-code@2.1.197"
  "@openai/codex@0.169.0"
  "@google/gemini-cli@0.61.0"
)

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${CLI_CACHE_DIR:-$ROOT/.cache/cli}"
mkdir -p "$DIR"

installed_version() {  # $1 = package name; prints its installed version or nothing
  local pj="$DIR/node_modules/$1/package.json"
  [ -f "$pj" ] && node -p "require(process.argv[1]).version" "$pj" 2>/dev/null || true
}

missing=()
for spec in "${PACKAGES[@]}"; do
  name="${spec%@*}"
  want="${spec##*@}"
  [ "$(installed_version "$name")" = "$want" ] || missing+=("$spec")
done

# One install at a time: two engineers (or two make runs) sharing the folder must not interleave npm.
exec 9>"$DIR/.lock"
flock 9
if [ "${#missing[@]}" -gt 0 ]; then
  [ -f "$DIR/package.json" ] || echo '{"private": true}' >"$DIR/package.json"
  echo "install-clis: installing ${missing[*]}"
  # All of them, not only the missing ones: npm prunes what package.json does not list.
  npm install --prefix "$DIR" --no-audit --no-fund --save-exact --loglevel=error "${PACKAGES[@]}"
fi

for spec in "${PACKAGES[@]}"; do
  name="${spec%@*}"
  want="${spec##*@}"
  got="$(installed_version "$name")"
  if [ "$got" != "$want" ]; then
    echo "install-clis: $name is ${got:-missing}, want $want" >&2
    exit 1
  fi
done
"$DIR/node_modules/.bin/claude" --version >/dev/null
"$DIR/node_modules/.bin/codex" --version >/dev/null
"$DIR/node_modules/.bin/gemini" --version >/dev/null
echo "install-clis: ok (${PACKAGES[*]})"
