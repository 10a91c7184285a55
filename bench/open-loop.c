// An open-loop HTTP load generator, as wrk2 is (wrk2 is in no registry this project reaches):
// `POST /plants` sent on a fixed schedule whatever the answers, each latency counted from the
// moment its request was due, so that a stall counts against every request it delays
// (coordinated omission corrected). Uniform arrivals at RATE per second over CONNECTIONS
// keep-alive connections, one request in flight on each; a request due while every connection
// waits for an answer is sent on the first one free, its latency still counted from its due
// time. The schedule is kept by a timerfd (nanoseconds, not the millisecond timers of Node or
// wrk), and how late the generator itself sent requests that had a connection free is reported
// as its lag: a run whose lag is near its latency measured the generator, not the server.
//
//   open-loop HOST PORT RATE WARMUP_S SECONDS CONNECTIONS FIRST_ID TOKEN
//
// Prints one JSON object on stdout (latencies in ms, of the requests due in the measured window,
// after WARMUP_S seconds at the same rate). Built by bench/open-loop.ts with the system's cc.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  int fd;
  int busy;
  int64_t due;  // the due time of the request in flight (ns)
  int measured; // whether it counts
  char buf[16384];
  size_t len;
} conn_t;

static struct sockaddr_in addr;
static const char *token;
static conn_t *conns;
static int nconns;
// The free connections, in the order they became free: each is used in turn, as 256 clients
// would be, and none sits idle long enough for the server to close it.
static int *free_ring;
static int free_head, nfree;
static void put_free(int i) { free_ring[(free_head + nfree++) % nconns] = i; }
static int take_free(void) {
  int i = free_ring[free_head];
  free_head = (free_head + 1) % nconns;
  nfree--;
  return i;
}
static int64_t next_id;
static int64_t answered, errors, status200, status503, status_other, waited, sent;
static double *lat;
static size_t nlat, cap_lat;
// The latencies of the requests due in the measured window's first second: a fresh instance's
// costs show there.
static double *first_lat;
static size_t nfirst, cap_first;
static int64_t first_second_end;
// And of those due in its first two seconds: how many of the window's slowest hundredth fall
// there shows whether a p99 was made by the start alone.
static double *early_lat;
static size_t nearly, cap_early;
static int64_t early_end;
static double *lag;
static size_t nlag, cap_lag;
static int epfd;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *xs, size_t n, double p) {
  if (n == 0) return 0;
  size_t i = (size_t)(p * (double)n);
  if (i >= n) i = n - 1;
  return xs[i];
}

static void open_conn(int i) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    perror("open-loop: connect");
    exit(2);
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
  epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
  conns[i].fd = fd;
  conns[i].busy = 0;
  conns[i].len = 0;
}

static void send_on(int i, int64_t due, int measured) {
  char body[128], req[1024];
  int blen = snprintf(body, sizeof body, "{\"id\":%lld,\"name\":\"bench plant\",\"tag\":\"bench\"}",
                      (long long)next_id++);
  int rlen = snprintf(req, sizeof req,
                      "POST /plants HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n"
                      "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                      inet_ntoa(addr.sin_addr), ntohs(addr.sin_port), token, blen, body);
  conns[i].busy = 1;
  conns[i].due = due;
  conns[i].measured = measured;
  sent++;
  if (write(conns[i].fd, req, (size_t)rlen) != rlen) {
    errors++;
    conns[i].busy = 0;
  }
}

// The request due at `due` goes out now: on a free connection, or later on the first one freed.
static int64_t *pending;
static size_t pend_head, pend_tail, pend_cap;

int main(int argc, char **argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: open-loop HOST PORT RATE WARMUP_S SECONDS CONNECTIONS FIRST_ID TOKEN\n");
    return 2;
  }
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(argv[2]));
  inet_pton(AF_INET, argv[1], &addr.sin_addr);
  double rate = atof(argv[3]);
  double warmup = atof(argv[4]), seconds = atof(argv[5]);
  nconns = atoi(argv[6]);
  next_id = atoll(argv[7]);
  token = argv[8];
  // Timer slack: the kernel may otherwise wake the schedule up to 50 µs late.
  prctl(PR_SET_TIMERSLACK, 1UL);

  epfd = epoll_create1(0);
  conns = calloc((size_t)nconns, sizeof *conns);
  free_ring = malloc(sizeof(int) * (size_t)nconns);
  for (int i = 0; i < nconns; i++) {
    open_conn(i);
    put_free(i);
  }
  int64_t total = (int64_t)(rate * (warmup + seconds));
  int64_t first_measured = (int64_t)(rate * warmup);
  cap_lat = (size_t)(total - first_measured) + 1;
  lat = malloc(sizeof(double) * cap_lat);
  cap_lag = cap_lat;
  lag = malloc(sizeof(double) * cap_lag);
  pend_cap = (size_t)total + 1;
  pending = malloc(sizeof(int64_t) * pend_cap);
  double interval = 1e9 / rate;
  cap_first = (size_t)rate + 2;
  first_lat = malloc(sizeof(double) * cap_first);
  cap_early = 2 * (size_t)rate + 2;
  early_lat = malloc(sizeof(double) * cap_early);

  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
  epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &tev);

  struct rusage ru0;
  getrusage(RUSAGE_SELF, &ru0);
  int64_t start = now_ns() + 1000000; // 1 ms to settle
  first_second_end = start + (int64_t)(warmup * 1e9) + 1000000000LL;
  early_end = first_second_end + 1000000000LL;
  int64_t k = 0;                      // the next request to fall due
  int64_t end_by = 0;
  int64_t inflight = 0;
  struct epoll_event evs[64];

  for (;;) {
    int64_t t = now_ns();
    // Everything due by now goes out.
    while (k < total) {
      int64_t due = start + (int64_t)((double)k * interval);
      if (due > t) break;
      int measured = k >= first_measured;
      if (nfree > 0) {
        int i = take_free();
        if (measured && nlag < cap_lag) lag[nlag++] = (double)(t - due) / 1e6;
        send_on(i, due, measured);
        inflight++;
      } else {
        pending[pend_tail++] = due * 2 + measured;
        if (measured) waited++;
      }
      k++;
    }
    if (k >= total && inflight == 0 && pend_head == pend_tail) break;
    if (k >= total && end_by == 0) end_by = t + 15000000000LL; // 15 s for the last answers
    if (end_by != 0 && t > end_by) {
      errors += inflight + (int64_t)(pend_tail - pend_head);
      break;
    }
    int timeout = -1;
    if (k < total) {
      int64_t due = start + (int64_t)((double)k * interval);
      struct itimerspec its = {0};
      its.it_value.tv_sec = due / 1000000000LL;
      its.it_value.tv_nsec = due % 1000000000LL;
      timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    } else {
      timeout = 100;
    }
    int n = epoll_wait(epfd, evs, 64, timeout);
    for (int e = 0; e < n; e++) {
      uint32_t i = evs[e].data.u32;
      if (i == UINT32_MAX) {
        uint64_t x;
        ssize_t r = read(tfd, &x, sizeof x);
        (void)r;
        continue;
      }
      conn_t *c = &conns[i];
      ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len - 1);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        // Closed by the server: the request in flight failed; open a new connection.
        epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        int was_busy = c->busy;
        open_conn((int)i);
        // One that was free is in the ring already; one that had a request in flight lost it.
        if (was_busy) {
          errors++;
          inflight--;
          put_free((int)i);
        }
        continue;
      }
      c->len += (size_t)r;
      c->buf[c->len] = 0;
      for (;;) {
        char *head_end = strstr(c->buf, "\r\n\r\n");
        if (head_end == NULL) break;
        size_t head = (size_t)(head_end - c->buf) + 4;
        long body = 0;
        for (char *p = c->buf; p < head_end; p++) {
          if ((*p == '\n') && strncasecmp(p + 1, "content-length:", 15) == 0) {
            body = atol(p + 16);
            break;
          }
        }
        if (c->len < head + (size_t)body) break;
        int status = atoi(c->buf + 9);
        int64_t done = now_ns();
        if (c->busy) {
          inflight--;
          answered++;
          if (c->measured) {
            if (status == 200) status200++;
            else if (status == 503) status503++;
            else status_other++;
            double ms = (double)(done - c->due) / 1e6;
            if (nlat < cap_lat) lat[nlat++] = ms;
            if (c->due < first_second_end && nfirst < cap_first) first_lat[nfirst++] = ms;
            if (c->due < early_end && nearly < cap_early) early_lat[nearly++] = ms;
          }
        }
        c->busy = 0;
        memmove(c->buf, c->buf + head + body, c->len - head - (size_t)body);
        c->len -= head + (size_t)body;
        c->buf[c->len] = 0;
        if (pend_head < pend_tail) {
          int64_t p = pending[pend_head++];
          send_on((int)i, p / 2, (int)(p % 2));
          inflight++;
        } else {
          put_free((int)i);
        }
      }
    }
  }
  struct rusage ru1;
  getrusage(RUSAGE_SELF, &ru1);
  double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
                        ru0.ru_stime.tv_sec) +
               (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec -
                        ru0.ru_stime.tv_usec) /
                   1e6;
  qsort(lat, nlat, sizeof(double), cmp);
  qsort(lag, nlag, sizeof(double), cmp);
  qsort(first_lat, nfirst, sizeof(double), cmp);
  // The slowest hundredth of the window: the latencies at or above its p99, counted by the same
  // test among all of them and among the first two seconds' (ties with the p99 in both).
  double p99 = pct(lat, nlat, 0.99);
  size_t slowest = 0, slowest_early = 0;
  while (slowest < nlat && lat[nlat - 1 - slowest] >= p99) slowest++;
  for (size_t i = 0; i < nearly; i++)
    if (early_lat[i] >= p99) slowest_early++;
  printf("{\"rate\":%.1f,\"sent\":%lld,\"answered\":%lld,\"measured\":%zu,\"ok\":%lld,"
         "\"unavailable\":%lld,\"otherStatus\":%lld,\"errors\":%lld,\"waitedForConnection\":%lld,"
         "\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f,"
         "\"lagP50\":%.3f,\"lagP99\":%.3f,\"lagMax\":%.3f,\"cpuSeconds\":%.3f,\"lastId\":%lld,"
         "\"firstSecondP99\":%.3f,\"firstSecondMax\":%.3f,\"slowest\":%zu,"
         "\"slowestInFirstTwoSeconds\":%zu}\n",
         rate, (long long)sent, (long long)answered, nlat, (long long)status200,
         (long long)status503, (long long)status_other, (long long)errors, (long long)waited,
         pct(lat, nlat, 0.5), pct(lat, nlat, 0.9), p99, pct(lat, nlat, 0.999),
         nlat ? lat[nlat - 1] : 0, pct(lag, nlag, 0.5), pct(lag, nlag, 0.99),
         nlag ? lag[nlag - 1] : 0, cpu, (long long)(next_id - 1), pct(first_lat, nfirst, 0.99),
         nfirst ? first_lat[nfirst - 1] : 0, slowest, slowest_early);
  return 0;
}
