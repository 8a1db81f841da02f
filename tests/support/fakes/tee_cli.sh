#!/bin/bash
# Runs a CLI as it is, keeping a copy of what it prints on stdout in .cli-stdout.jsonl in its working
# directory (the task's workspace): what a test compares the server's record of the run with. The CLI is
# $TEE_CLI_BIN with this script's arguments, or without it the arguments themselves (an `ndjson` command).
set -o pipefail
if [ -n "${TEE_CLI_BIN:-}" ]; then
  set -- "$TEE_CLI_BIN" "$@"
fi
"$@" | tee -a .cli-stdout.jsonl
