// Brings up a highly available Citus cluster on this machine and keeps it up until Ctrl-C
// (.ci/citus-ha.sh runs this): etcd, and Patroni 3 in Citus mode with a coordinator group and two
// worker groups, each a primary and a synchronous standby. Prints where each group is, the URL
// each instance of the service gets, and how to cause each event; stops everything at the end.
import { startCitusPatroniCluster } from './citus-patroni.ts'

const afters: (() => unknown)[] = []
const say = (line: string) => process.stdout.write(`citus-ha: ${line}\n`)
let stopping = false
async function stop(code: number) {
  if (stopping) return
  stopping = true
  say('stopping Patroni, PostgreSQL and etcd')
  for (const fn of afters.reverse()) await fn()
  process.exit(code)
}
process.on('SIGINT', () => void stop(0))
process.on('SIGTERM', () => void stop(0))

try {
  const cluster = await startCitusPatroniCluster(
    { after: (fn) => void afters.push(fn) },
    { log: say },
  )
  for (let g = 0; g < cluster.groups; g++) {
    const leader = await cluster.leaderOf(g)
    say(
      `group ${g}${g === 0 ? ' (coordinator)' : ' (worker)'}: ${cluster
        .groupOf(g)
        .map(
          (m) =>
            `${m.name} 127.0.0.1:${m.port} (REST ${m.rest})${m === leader ? ' primary' : ' standby'}`,
        )
        .join(', ')}`,
    )
  }
  say('run the service on each group with every node of that group, e.g.:')
  for (let g = 0; g < cluster.groups; g++)
    say(`  DATABASE_URL='${cluster.groupUrl(g)}' npm start   # group ${g}`)
  say(`a worker switchover: patronictl -c ${cluster.dir}/g0n0.yml switchover --group 1 --force`)
  say(`state of every group: patronictl -c ${cluster.dir}/g0n0.yml list`)
  say('Ctrl-C stops it all and removes its folder')
} catch (err) {
  process.stderr.write(`citus-ha: ${err instanceof Error ? err.message : String(err)}\n`)
  await stop(1)
}
