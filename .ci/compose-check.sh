#!/usr/bin/env bash
# Usage: POSTGRES_IMAGE=… NODE_IMAGE=… .ci/compose-check.sh
# Builds the Dockerfile and brings compose.yaml up for real, as a user would, then checks: /readyz
# answers 200 within 60 s; the service connects as plants_app, which may not update, delete or
# create; a token made with `compose run` gives a 200 create, a retry, a 40009
# and a 401; `docker stop` ends the service within 10 s with exit status 0 and its "stopped" log
# line; the plant and the token survive `down` and `up`. Everything it started is removed at the
# end, the data volume included. Needs a running engine (.ci/engine.sh start).
set -euo pipefail
cd "$(dirname "$0")/.."
export COMPOSE_PROJECT_NAME=plant-store-ci
export POSTGRES_IMAGE=${POSTGRES_IMAGE:-postgres:18-alpine} NODE_IMAGE=${NODE_IMAGE:-node:24-bookworm-slim}
base=http://127.0.0.1:8080
say() { echo "compose-check: $*"; }
fail() { echo "compose-check: FAILED: $*" >&2; compose logs --no-color --tail=30 >&2 || true; exit 1; }
if docker compose version >/dev/null 2>&1; then compose() { docker compose "$@"; }; else compose() { docker-compose "$@"; }; fi
trap 'compose down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
now_ms() { date +%s%3N; }

started=$(now_ms)
docker build -q --build-arg "NODE_IMAGE=$NODE_IMAGE" -t plant-store:latest . >/dev/null
size=$(docker image inspect -f '{{.Size}}' plant-store:latest)
say "built plant-store:latest on $NODE_IMAGE in $(($(now_ms) - started)) ms:" \
  "$((size / 1000000)) MB, user $(docker image inspect -f '{{.Config.User}}' plant-store:latest)"

ready_within() {
  local since
  since=$(now_ms)
  while [ $(($(now_ms) - since)) -lt "$1" ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz" || true)" = 200 ] && {
      echo $(($(now_ms) - since))
      return
    }
    sleep 0.5
  done
  return 1
}
# post BODY [TOKEN]: prints the status and the body.
post() {
  curl -s -w ' %{http_code}' "$base/plants" -H "authorization: Bearer ${2:-$token}" \
    -H 'content-type: application/json' -d "$1"
}
expect() {
  local got
  got=$(post "$2" "${3:-$token}")
  [[ "$got" == *" $1" ]] || fail "expected $1 for $2, got: $got"
  [ -z "${4:-}" ] || [[ "$got" == *"$4"* ]] || fail "expected $4 in: $got"
  say "  $1 for $2"
}

compose up -d --no-build 2>&1 | sed 's/^/  /'
ms=$(ready_within 60000) || fail "/readyz did not answer 200 within 60 s"
say "/readyz answered 200 $ms ms after up"

# Tokens are made as the tables' owner: the setup service's settings.
token=$(compose run --rm -T setup npm run -s token -- create ci) || fail "token create failed"
[[ "$token" == pst_* ]] || fail "compose run printed no token: $token"
say "made a token with compose run"
# The service connects as plants_app, which may not change or drop anything.
compose exec -T db psql -U plants -d plants -tAc \
  "select has_table_privilege('plants_app', 'plants', 'UPDATE') or has_table_privilege('plants_app', 'plants', 'DELETE') or has_database_privilege('plants_app', 'plants', 'CREATE')" |
  grep -qx f || fail "plants_app may change, delete or create"
compose exec -T db psql -U plants -d plants -tAc \
  "select count(*) from pg_stat_activity where usename = 'plants_app' and application_name = 'plant-store'" |
  grep -qvx 0 || fail "the service does not connect as plants_app"
say "the service connects as plants_app, which may not update, delete or create"
plant='{"id":9007199254740993,"name":"Compose fern","tag":"ci"}'
expect 200 "$plant" "$token" '"name":"Compose fern"'
expect 200 "$plant"
expect 400 '{"id":9007199254740993,"name":"Other"}' "$token" '"error":40009'
expect 401 "$plant" pst_not_a_token '"error":40102'

app=$(compose ps -q app)
started=$(now_ms)
docker stop -t 15 "$app" >/dev/null
stop_ms=$(($(now_ms) - started))
code=$(docker inspect -f '{{.State.ExitCode}}' "$app")
[ "$code" = 0 ] || fail "the service exited with status $code after docker stop"
[ "$stop_ms" -lt 10000 ] || fail "docker stop took $stop_ms ms"
docker logs "$app" 2>/dev/null | tail -3 | grep -q '"message":"stopped"' || fail "no \"stopped\" log line"
say "docker stop: exit status 0 after $stop_ms ms, \"stopped\" logged"

compose down 2>&1 | sed 's/^/  /'
compose up -d --no-build 2>&1 | sed 's/^/  /'
ms=$(ready_within 60000) || fail "/readyz did not answer 200 within 60 s after down and up"
say "up again: /readyz 200 after $ms ms"
expect 200 "$plant" "$token" '"tag":"ci"'
say "the plant and the token survived down and up"
compose down -v 2>&1 | sed 's/^/  /'
say "passed"
