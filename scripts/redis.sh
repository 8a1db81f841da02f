#!/usr/bin/env bash
# A throwaway Redis on loopback for tests and local clusters: `scripts/redis.sh start|stop|restart|status|url`.
# Port from REDIS_PORT (default 63790), files under REDIS_DIR (default /tmp/a2a-redis-$PORT), no persistence.
# `restart` really stops the process and starts a new, empty one (tests use it to simulate a Redis restart).
# Installs Debian's redis-server when missing (CI machines start without it).
set -euo pipefail

PORT="${REDIS_PORT:-63790}"
DIR="${REDIS_DIR:-/tmp/a2a-redis-$PORT}"
PIDFILE="$DIR/redis.pid"
HERE="$(cd "$(dirname "$0")" && pwd)"

bin() {
  command -v "$1" 2>/dev/null || echo "/usr/bin/$1"
}

ping() {
  [ "$("$(bin redis-cli)" -h 127.0.0.1 -p "$PORT" ping 2>/dev/null)" = PONG ]
}

# The pid in the pidfile, if that process is alive and is a redis-server.
our_pid() {
  local pid
  [ -s "$PIDFILE" ] || return 1
  pid="$(cat "$PIDFILE")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

start() {
  "$HERE/install-deb.sh" redis-server redis-server
  if our_pid >/dev/null; then
    echo "redis.sh: already running on 127.0.0.1:$PORT" >&2
    return
  fi
  if ping; then
    echo "redis.sh: port $PORT answers but is not the Redis of $PIDFILE; not touching it" >&2
    exit 1
  fi
  mkdir -p "$DIR"
  rm -f "$PIDFILE"
  "$(bin redis-server)" --bind 127.0.0.1 --port "$PORT" --protected-mode yes \
    --dir "$DIR" --save "" --appendonly no \
    --daemonize yes --pidfile "$PIDFILE" --logfile "$DIR/redis.log"
  for _ in $(seq 1 600); do # about 30 s: a start on a busy machine
    if ping && our_pid >/dev/null; then
      echo "redis.sh: Redis on 127.0.0.1:$PORT (pid $(our_pid))" >&2
      return
    fi
    sleep 0.05
  done
  echo "redis.sh: Redis did not come up on port $PORT; see $DIR/redis.log" >&2
  tail -n 20 "$DIR/redis.log" >&2 || true
  exit 1
}

stop() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    if ping; then
      echo "redis.sh: port $PORT answers but is not the Redis of $PIDFILE; not touching it" >&2
      exit 1
    fi
    return
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
  rm -f "$PIDFILE"
  echo "redis.sh: stopped Redis on port $PORT (pid $pid)" >&2
}

status() {
  local pid
  if pid="$(our_pid)" && ping; then
    echo "redis.sh: running on 127.0.0.1:$PORT (pid $pid)"
  else
    echo "redis.sh: not running on port $PORT"
    return 3
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  url) echo "redis://127.0.0.1:$PORT/0" ;;
  *) echo "usage: $0 start|stop|restart|status|url" >&2; exit 2 ;;
esac
