#!/usr/bin/env bash
# Usage: .ci/citus-ha.sh
# A highly available Citus cluster on this machine, as its users make one: etcd and Patroni 3 in
# Citus mode (Debian's patroni and etcd-server), a coordinator group and two worker groups, each a
# primary and a synchronous standby, PostgreSQL 15 with the Citus that .ci/citus.sh builds. Prints
# each group's nodes, the DATABASE_URL for an instance on each group and the patronictl commands;
# runs until Ctrl-C, then stops it all. Run as root on Debian (installs what is missing);
# docs/scaling.md ("High availability") says how to run the service on it.
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/citus.sh
if [ ! -x /usr/bin/patroni ] || [ ! -x /usr/bin/etcd ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patroni etcd-server >/dev/null
  # The packages start a system etcd (and Patroni) where they can; this cluster has its own.
  service etcd stop >/dev/null 2>&1 || true
fi
exec node --import tsx test/helpers/citus-ha-main.ts
