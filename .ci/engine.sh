#!/usr/bin/env bash
# Usage: .ci/engine.sh start | stop
# start: makes sure a Docker engine answers. When none does, installs Debian's docker.io and
# docker-compose if they are missing and starts dockerd itself (no systemd here), with its own
# pid file and log in the CI cache. stop: removes what CI left (containers, volumes, images and
# build cache), then stops the engine if start started it; an engine that was already running
# is left running.
set -euo pipefail
cache=${PLANT_STORE_CI_CACHE:-/var/cache/plant-store-ci}
state=$cache/engine
mkdir -p "$state"

answers() { timeout 10 docker info >/dev/null 2>&1; }

start() {
  if answers; then
    echo "engine.sh: a Docker engine already answers; using it"
    return
  fi
  if [ ! -x /usr/sbin/dockerd ] || ! command -v docker-compose >/dev/null; then
    echo "engine.sh: installing docker.io and docker-compose (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose >/dev/null
  fi
  echo "engine.sh: starting dockerd (log: $state/dockerd.log)"
  setsid /usr/sbin/dockerd --pidfile "$state/dockerd.pid" >"$state/dockerd.log" 2>&1 </dev/null &
  touch "$state/started-by-ci"
  for _ in $(seq 1 60); do
    answers && { docker version --format 'engine.sh: Docker engine {{.Server.Version}} answers'; return; }
    sleep 0.5
  done
  echo "engine.sh: dockerd did not answer within 30 s; its log:" >&2
  tail -20 "$state/dockerd.log" >&2
  exit 1
}

stop() {
  if answers; then
    local containers
    containers=$(docker ps -aq --filter label=org.testcontainers=true; docker ps -aq --filter label=com.docker.compose.project=plant-store-ci)
    [ -n "$containers" ] && docker rm -f -v $containers >/dev/null
    docker volume ls -q --filter label=com.docker.compose.project=plant-store-ci | xargs -r docker volume rm >/dev/null
    docker images -q --filter reference='plant-store*' | sort -u | xargs -r docker rmi -f >/dev/null 2>&1 || true
    docker builder prune -f >/dev/null 2>&1 || true
  fi
  if [ -f "$state/started-by-ci" ]; then
    rm -f "$state/started-by-ci"
    local pid
    pid=$(cat "$state/dockerd.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      echo "engine.sh: stopped dockerd ($pid)"
    fi
  fi
}

"${1:?usage: engine.sh start | stop}"
