/**
 * The contract's numbers, in one table. The code enforces them from here, and the OpenAPI
 * document and the metric help texts quote them from here; the README states them in words.
 */
export const limits = {
  /** The largest accepted body, in bytes (16 KiB). */
  bodyBytes: 16 * 1024,
  /** Lengths of a plant's texts, in Unicode code points, as PostgreSQL's `char_length` counts. */
  plant: { name: 200, tag: 100 },
  /** Time limits of a connection, in milliseconds: headers, whole request, idle keep-alive. */
  http: {
    headers: 10_000,
    request: 30_000,
    keepAlive: 5_000,
    /** A connection on which no byte moves either way (an answer left unread) is closed. */
    stalled: 10_000,
    /** Requests of one connection waiting behind the one that runs; one more closes it. */
    pipelined: 16,
    /** The longest X-Request-Id kept (of `[A-Za-z0-9._-]`); any other is replaced. */
    requestIdLength: 128,
    /** The longest path a log line keeps; a longer one is cut and marked with `…`. */
    loggedPathLength: 256,
  },
  /** Database time limits, in milliseconds. */
  database: {
    /** PostgreSQL cancels any statement running longer. */
    statement: 5_000,
    /** A create waits this long for its statement before it is answered 503. */
    request: 6_000,
    /**
     * A statement that failed for want of a database (a restart, a switchover, a terminated
     * backend) is sent again until its creates' deadline; its slot pauses first, this long the
     * first time and doubling up to `most` while the failures go on: a 1.5-s restart costs a
     * slot about 12 attempts, and the first create after it waits at most `most` for its turn.
     */
    resendPause: { first: 10, most: 200 },
    /**
     * A statement with no answer for this long, past the deadline of every create in it, has
     * its connection closed and a new one opened: a silent network partition, which the kernel
     * would otherwise leave retransmitting for minutes.
     */
    cutLoose: 6_500,
    /**
     * Sooner than `cutLoose`: a statement unanswered this long whose connection holds bytes the
     * server's kernel has not acknowledged, seen twice 250 ms apart, is cut loose the same way.
     * The kernel acknowledges within a round trip whatever the server is doing, so this is a
     * network that lets nothing through; cut loose, its statement is sent again on a new
     * connection, which gets through once the network is back, where the kernel's own
     * retransmission would come up to twice the partition's length after the send (Linux only:
     * src/db/reach/unacknowledged.ts).
     */
    unacknowledged: 1_000,
    /** Giving up on opening a connection. */
    connect: 3_000,
    /** `GET /readyz` gives the database this long to answer. */
    readiness: 2_000,
    /**
     * After a create refused for want of disk space, `/readyz` says 503 for this long without
     * asking; after that, while no create has been stored since, each probe writes one page
     * rolled back (`roomOnDisk`) to see whether the disk has room again.
     */
    diskFullHold: 5_000,
    /**
     * Both deadlines above count from the request's arrival, and a create or a readiness probe
     * stops waiting this long before its deadline: time for the answer to be written and carried
     * back, through a balancer too, within it (behind HAProxy, answers at the full deadline
     * reached the client late: test/faults/behind-haproxy.test.ts).
     */
    answerMargin: 300,
    /** A pool connection idle this long is closed. */
    idle: 60_000,
  },
  /**
   * Creates run at start through a private copy of the HTTP application whose store stores
   * nothing (`warm-up.ts`), before the instance listens, and each statement slot runs the batch
   * statements on no rows `statements` times: what a fresh process's first creates would pay
   * (connections, prepared statements, code not yet compiled, a small heap) is paid before
   * `/readyz` first says 200. `creates` is `WARM_UP_CREATES`'s default, `mostCreates` its most.
   * The first `atOnce` creates come each on a connection of its own, all at once (as a load
   * balancer's or a client pool's connections reach a new instance; at most half of
   * `MAX_CONNECTIONS`, since the warm-up holds both ends), the rest `connections` at a time.
   */
  warmUp: { creates: 10_000, mostCreates: 100_000, atOnce: 256, connections: 8, statements: 300 },
  /** How creates are grouped into statements. */
  batch: {
    /** Most rows in one statement. */
    maxBatch: 1000,
    /**
     * Most statements in flight at once. A create goes at once when none is; while one is,
     * the creates waiting go on the second once they are as many as the one in flight holds.
     */
    maxInFlight: 2,
    /**
     * On an instance on a Citus worker, statements in flight to each worker: its creates already
     * wait in one queue per worker, and one statement each makes fuller batches (faster than 2
     * in the bench's rounds through the workers: BENCHMARKS.md, "On a Citus cluster").
     */
    maxInFlightPerWorker: 1,
    /** Most creates waiting; beyond it a create is refused at once as unavailable (503). */
    maxQueued: 10_000,
  },
  /** Failed authentications a client address may make per window before it gets 429 (42901). */
  authFailures: { allowed: 100, windowSeconds: 10 },
  /**
   * The clients a rate limit (RATE_LIMIT, AUTH_FAILURE_LIMIT) counts at once; the longest unseen
   * is forgotten first, so that a flood of addresses or tokens cannot grow memory.
   */
  rateLimitKeys: 10_000,
  /** Token lifetimes and rotation, in milliseconds. */
  tokens: {
    /** A new token lives this long unless told otherwise: 90 days, as GitLab pre-fills. */
    lifetime: 90 * 86_400_000,
    /** The longest lifetime short of `never`: 365 days, GitLab's cap. */
    maxLifetime: 365 * 86_400_000,
    /** A rotated token keeps working this long beside its successor unless told otherwise. */
    grace: 86_400_000,
    /** The longest grace: 7 days, as Stripe's roll. */
    maxGrace: 7 * 86_400_000,
    /** A token that expires within this is warned about: a daily log line, a header, a metric. */
    warnBefore: 14 * 86_400_000,
    /** When a token was last used is written at most this often per token, across instances. */
    lastUseEvery: 10 * 60_000,
    /** Each instance reloads its tokens this often, in case a notification was lost. */
    reloadEvery: 30_000,
    /** After a failed write of last uses, none is tried again for this long. */
    lastUsePauseAfterFailure: 10_000,
    /** Failed writes of last uses are logged at most this often. */
    lastUseFailureLogEvery: 60_000,
    /** Tokens that expire within `warnBefore` are logged again this often while an instance runs. */
    warnEvery: 86_400_000,
  },
  /** Citus, in milliseconds. */
  citus: {
    /**
     * How often an instance reads again how plants is distributed (and, on a worker, where its
     * shards are): a DBA's distribution or a shard move reaches the creates within this.
     */
    writePathCheck: 10_000,
    /**
     * How often an instance on a Citus worker reads pg_dist_node's primaries again: Patroni's
     * update of a group's primary (a switchover or failover) reaches its creates, and the
     * coordinator's its tokens, within this.
     */
    primariesCheck: 500,
  },
  /** Worker processes (WORKERS), in milliseconds. */
  workers: {
    /** A worker that died within this long of its start is replaced after `restartPause`. */
    quickDeath: 5_000,
    restartPause: 1_000,
    /** A worker waits this long for the primary's sum of every worker's metrics. */
    metricsAnswer: 5_000,
  },
  /** Seconds a client is asked to wait after a 503 (`Retry-After`). */
  retryAfterSeconds: 1,
  /**
   * A stop on SIGTERM takes at most this long, in milliseconds, as `docker stop` allows: the
   * drain delay (DRAIN_DELAY), then the requests in flight finish, for what is left of it but
   * never less than `drainInFlight`.
   */
  drain: 10_000,
  /**
   * After SIGTERM an instance goes on serving this long by default (DRAIN_DELAY), its `/readyz`
   * 503, every answer `Connection: close`: a balancer that checks `/readyz` every second or two
   * has marked it down by then (HAProxy's `inter 1s fall 2`: at most 2 s) and stopped sending,
   * and the 7 s left of `drain` still cover a create's 6 s deadline.
   */
  drainDelay: 3_000,
  /** Requests in flight after the drain delay may always finish for this long: a deadline. */
  drainInFlight: 6_500,
  /**
   * At a stop, after the requests, the spans still waiting are sent for at most this long (a
   * collector that does not answer must not hold the stop past `drain`); the rest is dropped.
   */
  spansAtStop: 500,
  /** Ranges of the settings that count things (MAX_CONNECTIONS, RATE_LIMIT, AUTH_FAILURE_LIMIT, WORKERS). */
  settings: {
    /** The largest count a counting setting takes. */
    maxCount: 1_000_000,
    /** The most worker processes (WORKERS). */
    maxWorkers: 256,
    /** File handles MAX_CONNECTIONS=auto keeps apart from client connections: the pool, LISTEN, the log. */
    reservedHandles: 100,
    /** MAX_CONNECTIONS=auto is never below this. */
    minConnections: 16,
  },
} as const

/**
 * A whole number as the documents write it: 10000 as 10,000. Not `toLocaleString`, whose first
 * call loads the ICU locale data: about 15 ms of CPU at every start of a process that makes the
 * metrics' help texts.
 */
export const formatted = (n: number) => String(n).replace(/\B(?=(\d{3})+$)/g, ',')
