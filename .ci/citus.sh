#!/usr/bin/env bash
# Usage: .ci/citus.sh
# Builds Citus 13.2.2 for Debian's PostgreSQL 15 once per machine, outside the repository, from
# ../shared/vendor/citus-13.2.2.tar.gz (its README has the recipe and the one-line build fix;
# a clone elsewhere finds it at /work/shared/vendor, or CITUS_TARBALL names it), and installs it
# into PostgreSQL 15's folders. Installs the server and the build dependencies from
# Debian when they are missing. Does nothing when citus.so is already installed. The Citus tests
# (test/citus.test.ts) use the result; they skip without it, except in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
pg=/usr/lib/postgresql/15
cache=${PLANT_STORE_CI_CACHE:-/var/cache/plant-store-ci}

if [ -f "$pg/lib/citus.so" ]; then
  echo "citus.sh: Citus is installed in $pg"
  exit 0
fi
# The vendor folder sits beside the working tree (../shared/vendor); a clone made elsewhere, as
# CI's is, finds it at /work/shared/vendor or in the cache, where a copy is kept once found.
tarball=${CITUS_TARBALL:-}
if [ -z "$tarball" ]; then
  for candidate in ../shared/vendor /work/shared/vendor "$cache"; do
    if [ -f "$candidate/citus-13.2.2.tar.gz" ]; then
      tarball=$candidate/citus-13.2.2.tar.gz
      break
    fi
  done
fi
[ -f "$tarball" ] || {
  echo "citus.sh: no citus-13.2.2.tar.gz in ../shared/vendor, /work/shared/vendor or $cache;" \
    "set CITUS_TARBALL to its path" >&2
  exit 1
}
mkdir -p "$cache"
[ -f "$cache/citus-13.2.2.tar.gz" ] || cp "$tarball" "$cache/"

deps=(postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev liblz4-dev libzstd-dev
  libkrb5-dev libssl-dev libselinux1-dev libxslt1-dev libpam0g-dev libreadline-dev autoconf
  flex bison make gcc)
missing=()
for d in "${deps[@]}"; do dpkg -s "$d" >/dev/null 2>&1 || missing+=("$d"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "citus.sh: installing ${missing[*]} (Debian)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The package would start a system cluster where it can; the tests start their own.
service postgresql stop >/dev/null 2>&1 || true

build=$cache/citus-build
rm -rf "$build"
mkdir -p "$build"
tar -xzf "$tarball" -C "$build"
src=$build/citus-13.2.2
# Debian's PostgreSQL 15.20 declares have_createdb_privilege; Citus's own static copy for 15 then
# clashes with it. Renaming Citus's copy is the vendor README's one-line fix.
compat=$src/src/include/pg_version_compat.h
grep -q citus_compat_have_createdb_privilege "$compat" ||
  sed -i '/^static inline bool$/{N; s/^static inline bool\nhave_createdb_privilege(void)$/#define have_createdb_privilege citus_compat_have_createdb_privilege\n&/}' "$compat"
started=$SECONDS
(cd "$src" && PG_CONFIG=$pg/bin/pg_config ./configure >/dev/null && make -j"$(nproc)" >/dev/null && make install >/dev/null)
echo "citus.sh: built and installed Citus 13.2.2 into $pg in $((SECONDS - started)) s"
rm -rf "$build"
