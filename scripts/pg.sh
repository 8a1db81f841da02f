#!/usr/bin/env bash
# A throwaway PostgreSQL on loopback for tests and benchmarks: `scripts/pg.sh start|stop|url`.
# Installs Debian's postgresql when missing (CI machines start without it). As root, the server runs as
# the `postgres` user, because PostgreSQL refuses to run as root.
set -euo pipefail

PORT="${PG_PORT:-54329}"
DATA="${PG_DATA:-/tmp/a2a-pg-$PORT}"
DB="${PG_DB:-a2a_test}"

find_bin() {
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return; }
  done
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install_pg() {
  if [ -z "$(find_bin)" ]; then
    echo "pg.sh: installing postgresql from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq postgresql >/dev/null
  fi
}

start() {
  install_pg
  local bin; bin="$(find_bin)"
  if as_pg "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    echo "pg.sh: already running on port $PORT" >&2
  else
    if [ ! -s "$DATA/PG_VERSION" ]; then
      rm -rf "$DATA"; mkdir -p "$DATA"
      [ "$(id -u)" = 0 ] && chown postgres: "$DATA"
      as_pg "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    as_pg "$bin/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -o \
      "-p $PORT -k $DATA -c listen_addresses=127.0.0.1 -c max_connections=300 -c shared_buffers=256MB" start >/dev/null
  fi
  if ! as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
    as_pg "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qc "CREATE DATABASE $DB" >/dev/null
  fi
  echo "pg.sh: PostgreSQL on 127.0.0.1:$PORT, database $DB" >&2
}

stop() {
  local bin; bin="$(find_bin)"
  [ -n "$bin" ] && as_pg "$bin/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) echo "postgresql+asyncpg://postgres@127.0.0.1:$PORT/$DB" ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
