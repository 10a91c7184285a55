#!/usr/bin/env bash
# Usage: .ci/node-lts.sh VERSION
# Prints the folder of a `node` binary of VERSION (e.g. 24.21.0), unpacked once from the npm
# package node-linux-<arch> into the CI cache, outside the repository and package.json. Put the
# folder first on PATH to run npm and the suite on that Node.
set -euo pipefail
version=$1
cache=${PLANT_STORE_CI_CACHE:-/var/cache/plant-store-ci}
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64) arch=arm64 ;;
  *) echo "node-lts.sh: no node-linux package for $(uname -m)" >&2; exit 1 ;;
esac
dir=$cache/node-$version-$arch
if [ ! -x "$dir/bin/node" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.node-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "node-linux-$arch@$version" >/dev/null)
  tar -xzf "$tmp"/node-linux-*.tgz -C "$tmp" package/bin/node
  rm -rf "$dir"
  mkdir -p "$dir"
  mv "$tmp/package/bin" "$dir/bin"
fi
echo "$dir/bin"
