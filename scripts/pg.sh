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

# A fresh cluster in $DATA, started; `pg_ctl start` prints its own reason when it fails.
launch() {
  local bin="$1"
  if [ ! -s "$DATA/PG_VERSION" ]; then
    rm -rf "$DATA"; mkdir -p "$DATA"
    [ "$(id -u)" = 0 ] && chown postgres: "$DATA"
    as_pg "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  as_pg "$bin/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 120 -o \
    "-p $PORT -k $DATA -c listen_addresses=127.0.0.1 -c max_connections=300 -c shared_buffers=256MB" start >/dev/null
}

# A postmaster still serving $DATA although pg_ctl sees none (its lock file is gone or names another pid).
kill_orphans() {
  pkill -KILL -f -- "-D $DATA( |\$)" 2>/dev/null || true
}

start() {
  install_pg
  local bin; bin="$(find_bin)"
  # pg_ctl's status alone is not enough: a killed postmaster that nobody reaped still has a pid.
  if as_pg "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1 && "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
    echo "pg.sh: already running on port $PORT" >&2
  else
    if [ -e "$DATA/postmaster.pid" ]; then
      # A cluster that died without stopping: it is throwaway, so start afresh instead of waiting on its
      # crash recovery or on a lock file whose pid now names another process.
      echo "pg.sh: $DATA was not shut down cleanly; starting a new cluster there" >&2
      kill_orphans
      rm -rf "$DATA"
    fi
    if ! launch "$bin"; then
      echo "pg.sh: PostgreSQL did not start; the end of its log:" >&2
      tail -n 30 "$DATA/server.log" >&2 || true
      echo "pg.sh: trying once more in a new cluster" >&2
      as_pg "$bin/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
      kill_orphans
      rm -rf "$DATA"
      launch "$bin"
    fi
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
