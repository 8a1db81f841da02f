#!/usr/bin/env bash
# `scripts/install-deb.sh COMMAND PACKAGE`: install Debian's PACKAGE when COMMAND is missing (CI machines start
# without redis-server and nginx). The package's own service is not started: a policy-rc.d that refuses
# starts is put in place for the install when the machine has none, so nothing binds a public port.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 COMMAND PACKAGE" >&2
  exit 2
fi
cmd="$1"
pkg="$2"

have() {
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/usr/bin/$cmd" ]
}

have && exit 0

sudo=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo -n)
  else
    echo "install-deb.sh: $cmd is missing and installing $pkg needs root" >&2
    exit 1
  fi
fi

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  trap '"${sudo[@]}" rm -f "$policy"' EXIT
  printf '#!/bin/sh\n# Installed for the duration of install-deb.sh: no service starts.\nexit 101\n' |
    "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod 755 "$policy"
fi

echo "install-deb.sh: installing $pkg from Debian's packages" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
have || { echo "install-deb.sh: $pkg installed but $cmd is still missing" >&2; exit 1; }
