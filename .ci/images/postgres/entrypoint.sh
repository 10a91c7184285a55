#!/bin/bash
# The official postgres image's start-up, in short: on an empty data folder, initdb with
# POSTGRES_USER and POSTGRES_PASSWORD (password login from any address) and create POSTGRES_DB;
# then run the server, listening on every address.
set -euo pipefail
if [ "${1:-}" = postgres ]; then
  shift
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
    mkdir -p "$PGDATA"
    chmod 700 "$PGDATA"
    initdb -D "$PGDATA" -U "$user" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
      --encoding=UTF8 --locale=C --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
      echo "CREATE DATABASE \"$db\"" | postgres --single -D "$PGDATA" postgres >/dev/null
    fi
    echo "entrypoint: initialised $PGDATA with user $user and database $db"
  fi
  exec postgres -D "$PGDATA" -c listen_addresses='*' \
    -c unix_socket_directories=/var/run/postgresql "$@"
fi
exec "$@"
