#!/usr/bin/env bash
# A throw-away PostgreSQL on 127.0.0.1 for the store tests, from the machine's own packages.
#
#   hack/local-postgres.sh up | down | restart | env
set -euo pipefail

DIR=${WSYNC_POSTGRES_DIR:-${TMPDIR:-/tmp}/wsync-postgres}
PORT=${WSYNC_POSTGRES_PORT:-15432}

log() { printf '[local-postgres] %s\n' "$*" >&2; }

pg_bin() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$bin" ]; then
    log "installing postgresql"
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$bin"
}

# initdb refuses to run as root; use the postgres user then.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

up() {
  local bin; bin=$(pg_bin)
  if "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then log "already running on port $PORT"; return; fi
  rm -rf "$DIR"; mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres "$DIR"
  as_owner "$bin/initdb" -D "$DIR/data" -A trust -U wsync >/dev/null
  as_owner "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  log "ready on 127.0.0.1:$PORT"
}

down() {
  local bin; bin=$(pg_bin)
  [ -d "$DIR/data" ] && as_owner "$bin/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null 2>&1 || true
  rm -rf "$DIR"
  log "stopped"
}

# Stop and start again, keeping the data: a PostgreSQL restart, for the fault suite.
restart() {
  local bin; bin=$(pg_bin)
  as_owner "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -m fast restart >/dev/null
  log "restarted"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  restart) restart ;;
  env) echo "export WSYNC_TEST_POSTGRES_URL=postgres://wsync@127.0.0.1:$PORT/postgres" ;;
  *) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
