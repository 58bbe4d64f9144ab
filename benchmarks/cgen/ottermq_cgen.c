/*
 * ottermq-cgen: the C load generator of `make bench` (the c:* scenarios of benchmarks/run.py).
 *
 * A third generator, independent of our Python wire code and of amqp091-go, built so that it is not
 * the limit: librabbitmq-c (Debian's librabbitmq-dev, 0.11) opens every connection (handshake, login,
 * channel 1, declares, qos, consume, confirm.select), then the data connections switch to their raw
 * socket. Publishing writes a pre-encoded run of `-batch` (default 50) basic.publish + header + body
 * triples per write(); receiving reads up to 512 KiB per read() and walks the frames by hand (or, with
 * `-reader lib`, through librabbitmq's amqp_simple_wait_frame_noblock); acks are pre-encoded frames
 * gathered per read chunk into one write(). One thread and one poll() loop drive every connection, so
 * the process's CPU share (utime + stime over wall, `cpu_pct`) near 100 means the generator is the
 * limit, well below it means it is not.
 *
 * Usage:
 *   ottermq-cgen <scenario> [-url amqp://guest:guest@127.0.0.1:5672/%2F] [-count N] [-prefix P]
 *                [-stall 15s] [-size 100] [-batch 50] [-window 1000] [-reader raw|lib]
 *                [-queue Q] [-publishers 1] [-prefetch 1000] [-ack-every 100] [-progress 0]
 *
 * Scenarios (as benchmarks/go/src/ottermqbench): noack, ack-each, ack-multiple50, confirms,
 * confirms-consumed, fanout10, dlx; and for benchmarks/backlog.py, on a queue it declared (-queue):
 * backlog-publish (-publishers connections, persistent, confirms, -window each) and backlog-drain (one
 * consumer, -prefetch, a multiple ack every -ack-every deliveries, 0 = no-ack), which add t_first /
 * t_last (CLOCK_MONOTONIC), the connection.blocked / unblocked events and, with -progress S, a progress
 * line every S seconds before the result. Prints one JSON object:
 *   {"scenario", "count", "delivered", "seconds", "msgs_per_s", "cpu_s", "cpu_pct", "proc_cpu_s",
 *    "writes", "reads", "batch", "reader", "error"}
 * where seconds / msgs_per_s / cpu_* cover the timed part (first publish to last delivery, confirm or
 * dead letter) and proc_cpu_s the whole process (connections, declares and clean-up included).
 */
#define _GNU_SOURCE
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IN_CAP (512 * 1024)
#define FRAME_MAX AMQP_DEFAULT_FRAME_SIZE
#define MAX_CONNS 16
#define MAX_NAMES 32

/* ---------------------------------------------------------------------------------------------- */
/* options, errors, clocks                                                                         */
/* ---------------------------------------------------------------------------------------------- */
static struct {
  const char *url, *prefix, *reader, *queue;
  long count;
  int size, batch, window, lib_reader, publishers, prefetch, ack_every;
  double stall, progress;
} opt = {"amqp://guest:guest@127.0.0.1:5672/%2F", "bench.c", "raw", NULL, 100000, 100, 50, 1000, 0, 1, 1000, 100,
         15.0, 0.0};

static char err_text[512];
static long n_writes, n_reads;

static int fail(const char *fmt, ...) {
  if (err_text[0]) return -1; /* keep the first error: later ones are usually its consequences */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_text, sizeof err_text, fmt, ap);
  va_end(ap);
  return -1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_now(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------------- */
/* byte order and frame encoding                                                                   */
/* ---------------------------------------------------------------------------------------------- */
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) << 32 | rd32(p + 4); }
static inline uint8_t *w8(uint8_t *p, uint8_t v) { *p = v; return p + 1; }
static inline uint8_t *w16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; return p + 2; }
static inline uint8_t *w32(uint8_t *p, uint32_t v) { return w16(w16(p, v >> 16), (uint16_t)v); }
static inline uint8_t *w64(uint8_t *p, uint64_t v) { return w32(w32(p, (uint32_t)(v >> 32)), (uint32_t)v); }
static uint8_t *wstr(uint8_t *p, const char *s) {
  size_t n = strlen(s);
  p = w8(p, (uint8_t)n);
  memcpy(p, s, n);
  return p + n;
}

/* frame_start/frame_end: the 7-byte header with its size patched in once the payload is written. */
static uint8_t *frame_start(uint8_t *p, uint8_t type, uint16_t channel) {
  p = w8(p, type);
  p = w16(p, channel);
  return p + 4;
}
static uint8_t *frame_end(uint8_t *start, uint8_t *p) {
  w32(start + 3, (uint32_t)(p - start - 7));
  return w8(p, 0xCE);
}

/* basic.publish(exchange, routing key) + content header (delivery_mode 2 when persistent) + body. */
static size_t encode_publish(uint8_t *out, const char *exchange, const char *key, int persistent, int size) {
  uint8_t *f = out, *p;
  p = frame_start(f, 1, 1);
  p = w16(w16(p, 60), 40);
  p = w16(p, 0);
  p = wstr(wstr(p, exchange), key);
  p = w8(p, 0);
  f = p = frame_end(f, p);
  p = frame_start(f, 2, 1);
  p = w16(w16(p, 60), 0);
  p = w64(p, (uint64_t)size);
  if (persistent) p = w8(w16(p, 0x1000), 2);
  else p = w16(p, 0);
  f = p = frame_end(f, p);
  p = frame_start(f, 3, 1);
  memset(p, 'x', (size_t)size);
  p += size;
  p = frame_end(f, p);
  return (size_t)(p - out);
}

static size_t encode_ack(uint8_t *out, uint64_t tag, int multiple) {
  uint8_t *p = frame_start(out, 1, 1);
  p = w16(w16(p, 60), 80);
  p = w8(w64(p, tag), multiple ? 1 : 0);
  return (size_t)(frame_end(out, p) - out);
}

/* basic.consume(queue, consumer tag "", no-local 0, no-ack, exclusive 0, nowait 0, no arguments) */
static size_t encode_consume(uint8_t *out, const char *queue, int no_ack) {
  uint8_t *p = frame_start(out, 1, 1);
  p = w16(w16(p, 60), 20);
  p = w16(p, 0);
  p = wstr(wstr(p, queue), "");
  p = w8(p, no_ack ? 2 : 0);
  p = w32(p, 0);
  return (size_t)(frame_end(out, p) - out);
}

static size_t encode_connection_close(uint8_t *out) {
  uint8_t *p = frame_start(out, 1, 0);
  p = w16(w16(p, 10), 50);
  p = w16(wstr(w16(p, 200), "bye"), 0);
  p = w16(p, 0);
  return (size_t)(frame_end(out, p) - out);
}

/* ---------------------------------------------------------------------------------------------- */
/* librabbitmq: connections and the control channel                                                */
/* ---------------------------------------------------------------------------------------------- */
static int lib_check(amqp_rpc_reply_t r, const char *what) {
  switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return 0;
    case AMQP_RESPONSE_NONE:
      return fail("%s: missing RPC reply", what);
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      return fail("%s: %s", what, amqp_error_string2(r.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *m = r.reply.decoded;
        return fail("%s: connection closed %u %.*s", what, m->reply_code, (int)m->reply_text.len,
                    (char *)m->reply_text.bytes);
      }
      if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = r.reply.decoded;
        return fail("%s: channel closed %u %.*s", what, m->reply_code, (int)m->reply_text.len,
                    (char *)m->reply_text.bytes);
      }
      return fail("%s: server exception, method 0x%08x", what, r.reply.id);
  }
  return fail("%s: unknown reply", what);
}

/* client-properties {capabilities: {connection.blocked: true}}, merged by librabbitmq into its own
 * (which do not claim it): brokers then send connection.blocked / unblocked to the data connections,
 * whose raw reader records them. The control connection, read by librabbitmq's RPCs, does not ask. */
static amqp_table_entry_t cap_entry[1], prop_entry[1];
static amqp_table_t blocked_props(void) {
  cap_entry[0].key = amqp_cstring_bytes("connection.blocked");
  cap_entry[0].value.kind = AMQP_FIELD_KIND_BOOLEAN;
  cap_entry[0].value.value.boolean = 1;
  prop_entry[0].key = amqp_cstring_bytes("capabilities");
  prop_entry[0].value.kind = AMQP_FIELD_KIND_TABLE;
  prop_entry[0].value.value.table = (amqp_table_t){1, cap_entry};
  return (amqp_table_t){1, prop_entry};
}

static amqp_connection_state_t lib_open_as(const char *what, int blocked_capability);
static amqp_connection_state_t lib_open(const char *what) { return lib_open_as(what, 0); }

static amqp_connection_state_t lib_open_as(const char *what, int blocked_capability) {
  char url[1024], ctx[128];
  struct amqp_connection_info ci;
  snprintf(url, sizeof url, "%s", opt.url);
  if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK) {
    fail("bad url %s", opt.url);
    return NULL;
  }
  amqp_connection_state_t st = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(st);
  struct timeval tv = {10, 0};
  int rc = sock ? amqp_socket_open_noblock(sock, ci.host, ci.port, &tv) : AMQP_STATUS_NO_MEMORY;
  if (rc != AMQP_STATUS_OK) {
    fail("%s: connect %s:%d: %s", what, ci.host, ci.port, amqp_error_string2(rc));
    amqp_destroy_connection(st);
    return NULL;
  }
  snprintf(ctx, sizeof ctx, "%s: login", what);
  amqp_table_t props = blocked_props();
  amqp_rpc_reply_t login =
      blocked_capability ? amqp_login_with_properties(st, ci.vhost, 0, FRAME_MAX, 0, &props, AMQP_SASL_METHOD_PLAIN,
                                                      ci.user, ci.password)
                         : amqp_login(st, ci.vhost, 0, FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
  if (lib_check(login, ctx) ||
      (amqp_channel_open(st, 1), lib_check(amqp_get_rpc_reply(st), "channel.open"))) {
    amqp_destroy_connection(st);
    return NULL;
  }
  int one = 1;
  setsockopt(amqp_get_sockfd(st), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return st;
}

/* The control connection (declares, passive declares, deletes); reopened for the clean-up when an
 * error closed its channel. */
static amqp_connection_state_t ctl;
static int ctl_broken;
static char queues[MAX_NAMES][256], exchanges[MAX_NAMES][256];
static int n_queues, n_exchanges;

static int ctl_check(const char *what) {
  if (lib_check(amqp_get_rpc_reply(ctl), what) == 0) return 0;
  ctl_broken = 1;
  return -1;
}

static amqp_table_t args_table(amqp_table_entry_t *e, int n) { return (amqp_table_t){n, e}; }
static amqp_table_entry_t arg_i32(const char *k, int32_t v) {
  amqp_table_entry_t e = {amqp_cstring_bytes(k), {AMQP_FIELD_KIND_I32, {.i32 = v}}};
  return e;
}
static amqp_table_entry_t arg_str(const char *k, const char *v) {
  amqp_table_entry_t e = {amqp_cstring_bytes(k), {AMQP_FIELD_KIND_UTF8, {.bytes = amqp_cstring_bytes(v)}}};
  return e;
}

static const char *declare_queue(const char *what, int durable, amqp_table_t args) {
  if (n_queues == MAX_NAMES) return fail("too many queues"), NULL;
  char *name = queues[n_queues];
  snprintf(name, 256, "%s.%s", opt.prefix, what);
  amqp_queue_declare(ctl, 1, amqp_cstring_bytes(name), 0, durable, 0, 0, args);
  if (ctl_check("queue.declare")) return NULL;
  n_queues++;
  return name;
}

static const char *declare_exchange(const char *what, const char *kind) {
  if (n_exchanges == MAX_NAMES) return fail("too many exchanges"), NULL;
  char *name = exchanges[n_exchanges];
  snprintf(name, 256, "%s.%s", opt.prefix, what);
  amqp_exchange_declare(ctl, 1, amqp_cstring_bytes(name), amqp_cstring_bytes(kind), 0, 0, 1, 0,
                        amqp_empty_table);
  if (ctl_check("exchange.declare")) return NULL;
  n_exchanges++;
  return name;
}

static int bind_queue(const char *queue, const char *exchange) {
  amqp_queue_bind(ctl, 1, amqp_cstring_bytes(queue), amqp_cstring_bytes(exchange), amqp_empty_bytes,
                  amqp_empty_table);
  return ctl_check("queue.bind");
}

static long queue_depth(const char *queue) {
  amqp_queue_declare_ok_t *ok =
      amqp_queue_declare(ctl, 1, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
  if (ctl_check("queue.declare passive")) return -1;
  return (long)ok->message_count;
}

static void ctl_cleanup(void) {
  if (ctl_broken || ctl == NULL) {
    if (ctl) amqp_destroy_connection(ctl);
    ctl = lib_open("control (clean-up)");
    if (ctl == NULL) return;
  }
  for (int i = 0; i < n_queues; i++) {
    amqp_queue_delete(ctl, 1, amqp_cstring_bytes(queues[i]), 0, 0);
    amqp_maybe_release_buffers(ctl);
    if (amqp_get_rpc_reply(ctl).reply_type != AMQP_RESPONSE_NORMAL) {
      fprintf(stderr, "ottermq-cgen: could not delete queue %s\n", queues[i]);
      amqp_channel_open(ctl, 1); /* the failed delete closed channel 1 (if the connection survived) */
    }
  }
  for (int i = 0; i < n_exchanges; i++) {
    amqp_exchange_delete(ctl, 1, amqp_cstring_bytes(exchanges[i]), 0);
    amqp_maybe_release_buffers(ctl);
  }
  amqp_channel_close(ctl, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(ctl, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(ctl);
  ctl = NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* data connections: raw socket after the librabbitmq set-up                                       */
/* ---------------------------------------------------------------------------------------------- */
typedef struct conn {
  amqp_connection_state_t st;
  int fd;
  char what[32];
  int blocked; /* the last write() returned EAGAIN: wait for POLLOUT */
  /* reading (raw reader) */
  uint8_t *in;
  size_t in_len;
  /* pending bytes (acks, connection.close), written before the publish batches */
  uint8_t *pend;
  size_t pend_len, pend_off, pend_cap;
  /* publisher: a pre-encoded batch of opt.batch messages, `msg_len` bytes each */
  int publisher, confirm;
  uint8_t *batch;
  size_t msg_len, cur_len, cur_off;
  long to_send, sent, confirmed, nacked;
  uint8_t *seen; /* confirms by delivery tag (1..to_send) */
  long low;      /* lowest tag not confirmed yet */
  /* consumer */
  int consumer, ack_every;
  long delivered;
  uint64_t last_tag, acked_tag; /* the last delivery's tag, the last one acked (ack_every > 0) */
  double first_delivery;        /* CLOCK_MONOTONIC of the first basic.deliver, 0 before it */
  int close_ok;
} conn_t;

static conn_t *conns[MAX_CONNS];
static int n_conns;

static conn_t *conn_new(const char *what) {
  if (n_conns == MAX_CONNS) return fail("too many connections"), NULL;
  amqp_connection_state_t st = lib_open_as(what, !opt.lib_reader);
  if (st == NULL) return NULL;
  conn_t *c = calloc(1, sizeof *c);
  c->st = st;
  c->fd = amqp_get_sockfd(st);
  snprintf(c->what, sizeof c->what, "%s", what);
  c->in = malloc(IN_CAP);
  c->low = 1;
  conns[n_conns++] = c;
  return c;
}

static void on_blocked(conn_t *c, int blocked, const uint8_t *reason, size_t len);

/* After the last librabbitmq RPC on it: nothing may be left in librabbitmq's buffers (no delivery
 * can precede consume-ok, and nothing was published yet), so the socket is ours from here on. The one
 * exception is connection.blocked / unblocked, which a broker may send at any time (ottermq does as
 * soon as an alarm is on, to every connection that claims the capability; RabbitMQ once it
 * publishes): librabbitmq keeps them aside during its RPCs, and they are recorded here. */
static int conn_go_raw(conn_t *c) {
  struct timeval zero = {0, 0};
  amqp_frame_t fr;
  while (!opt.lib_reader && (amqp_data_in_buffer(c->st) || amqp_frames_enqueued(c->st))) {
    if (amqp_simple_wait_frame_noblock(c->st, &fr, &zero) != AMQP_STATUS_OK || fr.frame_type != AMQP_FRAME_METHOD)
      return fail("%s: librabbitmq still buffers data after set-up", c->what);
    if (fr.payload.method.id == AMQP_CONNECTION_BLOCKED_METHOD) {
      amqp_connection_blocked_t *b = fr.payload.method.decoded;
      on_blocked(c, 1, b->reason.bytes, b->reason.len);
    } else if (fr.payload.method.id == AMQP_CONNECTION_UNBLOCKED_METHOD) {
      on_blocked(c, 0, (const uint8_t *)"", 0);
    } else {
      return fail("%s: librabbitmq still buffers a method 0x%08x after set-up", c->what, fr.payload.method.id);
    }
  }
  int flags = fcntl(c->fd, F_GETFL);
  fcntl(c->fd, F_SETFL, flags | O_NONBLOCK);
  return 0;
}

static void pend_add(conn_t *c, const uint8_t *p, size_t n) {
  if (c->pend_len + n > c->pend_cap) {
    c->pend_cap = (c->pend_len + n) * 2 + 4096;
    c->pend = realloc(c->pend, c->pend_cap);
  }
  memcpy(c->pend + c->pend_len, p, n);
  c->pend_len += n;
}

static int consumer_setup(conn_t *c, const char *queue, int no_ack, int prefetch, int ack_every) {
  if (prefetch > 0) {
    amqp_basic_qos(c->st, 1, 0, (uint16_t)prefetch, 0);
    if (lib_check(amqp_get_rpc_reply(c->st), "basic.qos")) return -1;
  }
  amqp_basic_consume(c->st, 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, no_ack, 0, amqp_empty_table);
  if (lib_check(amqp_get_rpc_reply(c->st), "basic.consume")) return -1;
  c->consumer = 1;
  c->ack_every = no_ack ? 0 : ack_every;
  return conn_go_raw(c);
}

static int publisher_setup(conn_t *c, const char *exchange, const char *key, int persistent, int confirm,
                           long count) {
  if (confirm) {
    amqp_confirm_select(c->st, 1);
    if (lib_check(amqp_get_rpc_reply(c->st), "confirm.select")) return -1;
    c->seen = calloc((size_t)count + 2, 1);
  }
  uint8_t one[FRAME_MAX];
  c->msg_len = encode_publish(one, exchange, key, persistent, opt.size);
  c->batch = malloc(c->msg_len * (size_t)opt.batch);
  for (int i = 0; i < opt.batch; i++) memcpy(c->batch + i * c->msg_len, one, c->msg_len);
  c->publisher = 1;
  c->confirm = confirm;
  c->to_send = count;
  return conn_go_raw(c);
}

/* confirms: tags 1..to_send, `multiple` confirms every unconfirmed tag up to `tag` */
static void on_confirm(conn_t *c, uint64_t tag, int multiple, int ack) {
  if (c->seen == NULL || tag == 0) return;
  if (tag > (uint64_t)c->sent) tag = (uint64_t)c->sent;
  long from = multiple ? c->low : (long)tag;
  for (long t = from; t <= (long)tag; t++) {
    if (!c->seen[t]) {
      c->seen[t] = 1;
      if (ack) c->confirmed++;
      else c->nacked++;
    }
  }
  while (c->low <= c->sent && c->seen[c->low]) c->low++;
}

static void ack_upto(conn_t *c, uint64_t tag, int multiple) {
  uint8_t ack[32];
  pend_add(c, ack, encode_ack(ack, tag, multiple));
  c->acked_tag = tag;
}

static void on_deliver(conn_t *c, uint64_t tag) {
  if (c->delivered++ == 0) c->first_delivery = now();
  c->last_tag = tag;
  if (c->ack_every == 1 || (c->ack_every > 1 && c->delivered % c->ack_every == 0))
    ack_upto(c, tag, c->ack_every > 1);
}

/* connection.blocked / unblocked as they arrive: CLOCK_MONOTONIC (Python's time.monotonic() on
 * Linux, so the harness can place them among its samples), connection, reason */
#define MAX_EVENTS 256
static struct {
  double t;
  int blocked;
  char conn[32], reason[256];
} events[MAX_EVENTS];
static int n_events, n_events_lost;

static void on_blocked(conn_t *c, int blocked, const uint8_t *reason, size_t len) {
  fprintf(stderr, "ottermq-cgen: %s: connection.%s %.*s\n", c->what, blocked ? "blocked" : "unblocked",
          (int)len, (const char *)reason);
  if (n_events == MAX_EVENTS) {
    n_events_lost++;
    return;
  }
  events[n_events].t = now();
  events[n_events].blocked = blocked;
  snprintf(events[n_events].conn, sizeof events[n_events].conn, "%s", c->what);
  snprintf(events[n_events].reason, sizeof events[n_events].reason, "%.*s", (int)len, (const char *)reason);
  n_events++;
}

/* one method frame's payload (class id, method id, arguments) */
static int on_method(conn_t *c, const uint8_t *p, uint32_t n) {
  if (n < 4) return fail("%s: short method frame", c->what);
  switch (rd32(p)) {
    case 0x003C003C: /* basic.deliver: consumer-tag, delivery-tag, ... */
      if (n < 5u + p[4] + 8u) return fail("%s: short basic.deliver", c->what);
      on_deliver(c, rd64(p + 5 + p[4]));
      return 0;
    case 0x003C0050: /* basic.ack (confirm) */
      if (n < 13) return fail("%s: short basic.ack", c->what);
      on_confirm(c, rd64(p + 4), p[12] & 1, 1);
      return 0;
    case 0x003C0078: /* basic.nack */
      if (n < 13) return fail("%s: short basic.nack", c->what);
      on_confirm(c, rd64(p + 4), p[12] & 1, 0);
      return 0;
    case 0x00140028: /* channel.close */
    case 0x000A0032: /* connection.close */
      if (n < 7u + p[6]) return fail("%s: short close", c->what);
      return fail("%s: %s closed by the broker: %u %.*s", c->what, p[1] == 20 ? "channel" : "connection",
                  rd16(p + 4), p[6], (const char *)p + 7);
    case 0x000A0033: /* connection.close-ok */
      c->close_ok = 1;
      return 0;
    case 0x000A003C: /* connection.blocked (reason): the stall watchdog reports it if it lasts */
      if (n < 5u + p[4]) return fail("%s: short connection.blocked", c->what);
      on_blocked(c, 1, p + 5, p[4]);
      return 0;
    case 0x000A003D: /* connection.unblocked */
      on_blocked(c, 0, (const uint8_t *)"", 0);
      return 0;
    default:
      return 0;
  }
}

static int parse(conn_t *c) {
  size_t off = 0;
  while (c->in_len - off >= 8) {
    const uint8_t *f = c->in + off;
    uint32_t size = rd32(f + 3);
    if (size > FRAME_MAX) return fail("%s: frame of %u bytes", c->what, size);
    if (c->in_len - off < size + 8u) break;
    if (f[7 + size] != 0xCE) return fail("%s: bad frame end", c->what);
    if (f[0] == 1 && on_method(c, f + 7, size)) return -1;
    off += size + 8u;
  }
  if (off) {
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
  }
  return 0;
}

static int read_raw(conn_t *c) {
  for (;;) {
    size_t room = IN_CAP - c->in_len;
    ssize_t n = read(c->fd, c->in + c->in_len, room);
    n_reads++;
    if (n > 0) {
      c->in_len += (size_t)n;
      if (parse(c)) return -1;
      if ((size_t)n < room) return 0; /* drained; a full read means there may be more */
      continue;
    }
    if (n == 0) return fail("%s: the broker closed the connection", c->what);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return fail("%s: read: %s", c->what, strerror(errno));
  }
}

/* -reader lib: librabbitmq decodes every frame (amqp_simple_wait_frame_noblock until it times out) */
static int read_lib(conn_t *c) {
  struct timeval zero = {0, 0};
  amqp_frame_t fr;
  for (;;) {
    int rc = amqp_simple_wait_frame_noblock(c->st, &fr, &zero);
    if (rc == AMQP_STATUS_TIMEOUT) break;
    if (rc != AMQP_STATUS_OK) return fail("%s: %s", c->what, amqp_error_string2(rc));
    if (fr.frame_type != AMQP_FRAME_METHOD) continue;
    amqp_method_t *m = &fr.payload.method;
    switch (m->id) {
      case AMQP_BASIC_DELIVER_METHOD:
        on_deliver(c, ((amqp_basic_deliver_t *)m->decoded)->delivery_tag);
        break;
      case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = m->decoded;
        on_confirm(c, a->delivery_tag, a->multiple, 1);
        break;
      }
      case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *a = m->decoded;
        on_confirm(c, a->delivery_tag, a->multiple, 0);
        break;
      }
      case AMQP_CHANNEL_CLOSE_METHOD:
      case AMQP_CONNECTION_CLOSE_METHOD: {
        amqp_channel_close_t *x = m->decoded; /* same leading fields as connection.close */
        return fail("%s: closed by the broker: %u %.*s", c->what, x->reply_code, (int)x->reply_text.len,
                    (char *)x->reply_text.bytes);
      }
      case AMQP_CONNECTION_CLOSE_OK_METHOD:
        c->close_ok = 1;
        break;
      default:
        break;
    }
  }
  amqp_maybe_release_buffers(c->st);
  return 0;
}

static void fill_batch(conn_t *c) {
  long room = c->to_send - c->sent;
  if (c->confirm) {
    long window = opt.window - (c->sent - c->confirmed - c->nacked);
    if (window < room) room = window;
  }
  if (room <= 0) return;
  if (room > opt.batch) room = opt.batch;
  c->cur_off = 0;
  c->cur_len = (size_t)room * c->msg_len;
  c->sent += room;
}

/* write pending acks/close, then publish batches, until done or the socket is full */
static int flush(conn_t *c) {
  while (!c->blocked) {
    const uint8_t *p;
    size_t n, *off;
    if (c->pend_off < c->pend_len) {
      p = c->pend + c->pend_off, n = c->pend_len - c->pend_off, off = &c->pend_off;
    } else {
      c->pend_off = c->pend_len = 0;
      if (!c->publisher) return 0;
      if (c->cur_off >= c->cur_len) fill_batch(c);
      if (c->cur_off >= c->cur_len) return 0;
      p = c->batch + c->cur_off, n = c->cur_len - c->cur_off, off = &c->cur_off;
    }
    ssize_t w = write(c->fd, p, n);
    n_writes++;
    if (w >= 0) {
      *off += (size_t)w;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      c->blocked = 1;
      return 0;
    }
    return fail("%s: write: %s", c->what, strerror(errno));
  }
  return 0;
}

static int has_output(const conn_t *c) {
  return c->pend_off < c->pend_len || (c->publisher && c->cur_off < c->cur_len);
}

static int all_published(void) {
  for (int i = 0; i < n_conns; i++)
    if (conns[i]->publisher && (conns[i]->sent < conns[i]->to_send || has_output(conns[i]))) return 0;
  return 1;
}

static long progress(void) {
  long p = 0;
  for (int i = 0; i < n_conns; i++) p += conns[i]->delivered + conns[i]->sent + conns[i]->confirmed;
  return p;
}

static long total_delivered(void) {
  long n = 0;
  for (int i = 0; i < n_conns; i++) n += conns[i]->delivered;
  return n;
}

/* -progress S: one JSON line on stdout every S seconds while a phase runs (the harness logs them and
 * places them among its RSS samples); the result stays the last line */
static double last_progress;
static void maybe_progress(void) {
  if (opt.progress <= 0) return;
  double t = now();
  if (t - last_progress < opt.progress) return;
  last_progress = t;
  long sent = 0, confirmed = 0, nacked = 0, delivered = 0;
  int blocked = 0;
  for (int i = 0; i < n_conns; i++) {
    sent += conns[i]->sent, confirmed += conns[i]->confirmed, nacked += conns[i]->nacked;
    delivered += conns[i]->delivered;
  }
  for (int i = 0; i < n_events; i++) blocked += events[i].blocked ? 1 : -1;
  printf("{\"progress\": true, \"t\": %.3f, \"sent\": %ld, \"confirmed\": %ld, \"nacked\": %ld, "
         "\"delivered\": %ld, \"blocked_conns\": %d}\n",
         t, sent, confirmed, nacked, delivered, blocked);
  fflush(stdout);
}

/* SIGTERM / SIGINT end the phase running (its result printed as a failure "stopped by signal"), so a
 * harness stopping a run early still gets the exact counts */
static volatile sig_atomic_t stop_signal;
static void on_stop_signal(int sig) { stop_signal = sig; }

/* the poll() loop over every data connection, until done() or a stall of opt.stall seconds */
static int run_until(int (*done)(void), double stall, const char *stalled_what) {
  struct pollfd pfd[MAX_CONNS];
  long last = -1;
  double changed = now();
  for (;;) {
    if (stop_signal) return fail("stopped by signal %d", (int)stop_signal);
    maybe_progress();
    for (int i = 0; i < n_conns; i++)
      if (flush(conns[i])) return -1;
    if (done()) return 0;
    for (int i = 0; i < n_conns; i++) {
      pfd[i].fd = conns[i]->fd;
      pfd[i].events = POLLIN | (has_output(conns[i]) && conns[i]->blocked ? POLLOUT : 0);
      pfd[i].revents = 0;
    }
    if (poll(pfd, (nfds_t)n_conns, 100) < 0 && errno != EINTR) return fail("poll: %s", strerror(errno));
    for (int i = 0; i < n_conns; i++) {
      conn_t *c = conns[i];
      if (pfd[i].revents & POLLOUT) c->blocked = 0;
      if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        /* lib reader: librabbitmq may hold whole frames of the last read in its own buffer */
        if (opt.lib_reader ? read_lib(c) : read_raw(c)) return -1;
      }
    }
    long p = progress();
    if (p != last) {
      last = p;
      changed = now();
    } else if (now() - changed > stall) {
      long published = 0, confirmed = 0;
      for (int i = 0; i < n_conns; i++) published += conns[i]->sent, confirmed += conns[i]->confirmed;
      return fail("stalled waiting for %s (%ld delivered, %ld published, %ld confirmed)", stalled_what,
                  total_delivered(), published, confirmed);
    }
  }
}

/* ---------------------------------------------------------------------------------------------- */
/* scenarios                                                                                       */
/* ---------------------------------------------------------------------------------------------- */
typedef struct {
  long count, delivered;
  double seconds, cpu_s;
} result_t;

static double t0, cpu0;
static void clock_start(void) {
  t0 = now();
  cpu0 = cpu_now();
}
static void clock_stop(result_t *r) {
  r->seconds = now() - t0;
  r->cpu_s = cpu_now() - cpu0;
}

static long target; /* deliveries each consumer waits for */
static int consumers_done(void) {
  if (!all_published()) return 0;
  for (int i = 0; i < n_conns; i++)
    if (conns[i]->consumer && conns[i]->delivered < target) return 0;
  return 1;
}
static int confirms_done(void) {
  for (int i = 0; i < n_conns; i++)
    if (conns[i]->publisher && conns[i]->confirmed + conns[i]->nacked < conns[i]->to_send) return 0;
  return consumers_done();
}

static int one_queue(const char *name, int no_ack, int prefetch, int ack_every, result_t *r) {
  const char *q = declare_queue(name, 0, amqp_empty_table);
  conn_t *cons = q ? conn_new("consumer") : NULL;
  if (cons == NULL || consumer_setup(cons, q, no_ack, prefetch, ack_every)) return -1;
  conn_t *pub = conn_new("publisher");
  if (pub == NULL || publisher_setup(pub, "", q, 0, 0, opt.count)) return -1;
  target = opt.count;
  clock_start();
  int rc = run_until(consumers_done, opt.stall, "deliveries");
  clock_stop(r);
  r->delivered = cons->delivered;
  return rc;
}

static int confirms(const char *name, int consumed, result_t *r) {
  const char *q = declare_queue(name, 1, amqp_empty_table);
  if (q == NULL) return -1;
  if (consumed) {
    conn_t *cons = conn_new("consumer");
    if (cons == NULL || consumer_setup(cons, q, 1, 0, 0)) return -1;
  }
  conn_t *pub = conn_new("publisher");
  if (pub == NULL || publisher_setup(pub, "", q, 1, 1, opt.count)) return -1;
  target = consumed ? opt.count : 0;
  clock_start();
  int rc = run_until(confirms_done, opt.stall, "confirms");
  clock_stop(r);
  r->delivered = total_delivered();
  if (rc == 0 && pub->nacked) return fail("%ld nacks", pub->nacked);
  return rc;
}

static int fanout(const char *name, int n, result_t *r) {
  const char *x = declare_exchange(name, "fanout");
  if (x == NULL) return -1;
  for (int i = 0; i < n; i++) {
    char what[64];
    amqp_table_entry_t e[] = {arg_i32("x-expires", 60000)};
    snprintf(what, sizeof what, "%s.%d", name, i);
    const char *q = declare_queue(what, 0, args_table(e, 1));
    if (q == NULL || bind_queue(q, x)) return -1;
    snprintf(what, sizeof what, "consumer %d", i);
    conn_t *cons = conn_new(what);
    if (cons == NULL || consumer_setup(cons, q, 1, 0, 0)) return -1;
  }
  conn_t *pub = conn_new("publisher");
  if (pub == NULL || publisher_setup(pub, x, "", 0, 0, opt.count)) return -1;
  target = opt.count;
  clock_start();
  int rc = run_until(consumers_done, opt.stall, "deliveries");
  clock_stop(r);
  r->delivered = total_delivered();
  return rc;
}

static int dlx(result_t *r) {
  const char *dead = declare_exchange("dlx", "fanout");
  const char *dlq = dead ? declare_queue("dlq", 0, amqp_empty_table) : NULL;
  if (dlq == NULL || bind_queue(dlq, dead)) return -1;
  amqp_table_entry_t e[] = {arg_i32("x-message-ttl", 1), arg_str("x-dead-letter-exchange", dead)};
  const char *src = declare_queue("src", 0, args_table(e, 2));
  conn_t *pub = src ? conn_new("publisher") : NULL;
  if (pub == NULL || publisher_setup(pub, "", src, 0, 0, opt.count)) return -1;
  clock_start();
  if (run_until(all_published, opt.stall, "publishing")) return -1;
  long seen = 0;
  double changed = now();
  for (;;) {
    long depth = queue_depth(dlq);
    if (depth < 0) return -1;
    r->delivered = depth;
    if (depth >= opt.count) break;
    if (depth != seen) {
      seen = depth;
      changed = now();
    } else if (now() - changed > opt.stall) {
      clock_stop(r);
      return fail("stalled at %ld dead letters", depth);
    }
    sleep_s(0.02);
  }
  clock_stop(r);
  return 0;
}

/* backlog-publish: -publishers connections publish -count persistent messages (split evenly) with
 * confirms (-window unconfirmed each) to the existing queue -queue through the default exchange; nothing
 * is declared or deleted. Timed from the first publish to the last confirm. */
static double t_first, t_last; /* first publish / consume-ok, last confirm / delivery */

static int backlog_publish(result_t *r) {
  if (opt.queue == NULL) return fail("backlog-publish needs -queue");
  long share = opt.count / opt.publishers;
  for (int i = 0; i < opt.publishers; i++) {
    char what[32];
    snprintf(what, sizeof what, "publisher %d", i);
    conn_t *pub = conn_new(what);
    long n = share + (i == 0 ? opt.count % opt.publishers : 0);
    if (pub == NULL || publisher_setup(pub, "", opt.queue, 1, 1, n)) return -1;
  }
  target = 0;
  clock_start();
  t_first = t0;
  int rc = run_until(confirms_done, opt.stall, "confirms");
  clock_stop(r);
  t_last = now();
  long nacked = 0;
  for (int i = 0; i < n_conns; i++) r->delivered += conns[i]->confirmed, nacked += conns[i]->nacked;
  if (rc == 0 && nacked) return fail("%ld nacks", nacked);
  return rc;
}

/* backlog-drain: one consumer on the existing queue -queue, prefetch -prefetch, a multiple ack every
 * -ack-every deliveries (0: no-ack), until -count deliveries; the last ones acked before the close.
 * The queue is full already, so deliveries follow consume-ok at once: basic.consume is written on the
 * raw socket (librabbitmq would buffer them), its consume-ok skipped by the raw reader. Timed from
 * writing basic.consume to the last delivery. */
static conn_t *drainer;
static int acks_written(void) { return drainer->pend_off >= drainer->pend_len; }

static int backlog_drain(result_t *r) {
  if (opt.queue == NULL) return fail("backlog-drain needs -queue");
  drainer = conn_new("consumer");
  if (drainer == NULL) return -1;
  int no_ack = opt.ack_every == 0;
  if (!no_ack && opt.prefetch > 0) {
    amqp_basic_qos(drainer->st, 1, 0, (uint16_t)opt.prefetch, 0);
    if (lib_check(amqp_get_rpc_reply(drainer->st), "basic.qos")) return -1;
  }
  if (conn_go_raw(drainer)) return -1;
  drainer->consumer = 1;
  drainer->ack_every = opt.ack_every;
  uint8_t consume[512];
  target = opt.count;
  clock_start();
  pend_add(drainer, consume, encode_consume(consume, opt.queue, no_ack));
  t_first = t0;
  int rc = run_until(consumers_done, opt.stall, "deliveries");
  clock_stop(r);
  t_last = now();
  r->delivered = drainer->delivered;
  if (rc == 0 && !no_ack && drainer->acked_tag < drainer->last_tag) {
    ack_upto(drainer, drainer->last_tag, 1);
    rc = run_until(acks_written, opt.stall, "the last ack");
  }
  return rc;
}

/* connection.close on every data connection, close-ok awaited for up to 2 s, then the sockets go */
static int closing_done(void) {
  for (int i = 0; i < n_conns; i++)
    if (!conns[i]->close_ok) return 0;
  return 1;
}
static void close_all(void) {
  char saved[sizeof err_text];
  memcpy(saved, err_text, sizeof saved);
  uint8_t frame[64];
  size_t n = encode_connection_close(frame);
  for (int i = 0; i < n_conns; i++) {
    conns[i]->publisher = 0; /* nothing more to publish, whatever is left */
    conns[i]->consumer = 0;
    conns[i]->ack_every = 0;
    conns[i]->pend_off = conns[i]->pend_len = 0;
    pend_add(conns[i], frame, n);
  }
  err_text[0] = 0;
  stop_signal = 0; /* a signal stopped the phase, not its goodbye */
  run_until(closing_done, 2.0, "connection.close-ok");
  memcpy(err_text, saved, sizeof saved); /* a close that times out is not the run's result */
  for (int i = 0; i < n_conns; i++) amqp_destroy_connection(conns[i]->st);
}

static double parse_seconds(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (strcmp(end, "ms") == 0) v /= 1000;
  else if (strcmp(end, "m") == 0) v *= 60;
  return v;
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
    else putchar(*s);
  }
  putchar('"');
}

int main(int argc, char **argv) {
  double start = now();
  if (argc < 2) {
    fprintf(stderr, "usage: ottermq-cgen <scenario> [-url URL] [-count N] [-prefix P] [-stall S] [-size B]"
                    " [-batch N] [-window N] [-reader raw|lib] [-queue Q] [-publishers N] [-prefetch N]"
                    " [-ack-every N] [-progress S]\n");
    return 2;
  }
  const char *name = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "-url")) opt.url = v;
    else if (!strcmp(k, "-prefix")) opt.prefix = v;
    else if (!strcmp(k, "-count")) opt.count = atol(v);
    else if (!strcmp(k, "-stall")) opt.stall = parse_seconds(v);
    else if (!strcmp(k, "-size")) opt.size = atoi(v);
    else if (!strcmp(k, "-batch")) opt.batch = atoi(v);
    else if (!strcmp(k, "-window")) opt.window = atoi(v);
    else if (!strcmp(k, "-reader")) opt.reader = v;
    else if (!strcmp(k, "-queue")) opt.queue = v;
    else if (!strcmp(k, "-publishers")) opt.publishers = atoi(v);
    else if (!strcmp(k, "-prefetch")) opt.prefetch = atoi(v);
    else if (!strcmp(k, "-ack-every")) opt.ack_every = atoi(v);
    else if (!strcmp(k, "-progress")) opt.progress = parse_seconds(v);
    else {
      fprintf(stderr, "unknown option %s\n", k);
      return 2;
    }
  }
  opt.lib_reader = !strcmp(opt.reader, "lib");
  if (opt.batch < 1 || opt.count < 1 || opt.size < 0 || opt.size > FRAME_MAX - 8 || opt.publishers < 1 ||
      opt.publishers > MAX_CONNS || opt.prefetch < 0 || opt.prefetch > 65535 || opt.ack_every < 0 ||
      (!opt.lib_reader && strcmp(opt.reader, "raw"))) {
    fprintf(stderr, "bad option value\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, on_stop_signal);
  signal(SIGINT, on_stop_signal);

  result_t r = {.count = opt.count};
  int rc = -1;
  ctl = lib_open("control");
  if (ctl != NULL) {
    if (!strcmp(name, "noack")) rc = one_queue(name, 1, 0, 0, &r);
    else if (!strcmp(name, "ack-each")) rc = one_queue(name, 0, 100, 1, &r);
    else if (!strcmp(name, "ack-multiple50")) rc = one_queue(name, 0, 100, 50, &r);
    else if (!strcmp(name, "confirms")) rc = confirms(name, 0, &r);
    else if (!strcmp(name, "confirms-consumed")) rc = confirms(name, 1, &r);
    else if (!strcmp(name, "fanout10")) rc = fanout(name, 10, &r);
    else if (!strcmp(name, "dlx")) rc = dlx(&r);
    else if (!strcmp(name, "backlog-publish")) rc = backlog_publish(&r);
    else if (!strcmp(name, "backlog-drain")) rc = backlog_drain(&r);
    else {
      fprintf(stderr, "unknown scenario %s\n", name);
      return 2;
    }
  }
  (void)rc;
  close_all();
  if (ctl != NULL || n_queues || n_exchanges) ctl_cleanup();

  /* fanout10 counts deliveries (10 per message), the others messages, as the Go generator */
  long counted = !strncmp(name, "confirms", 8) || !strcmp(name, "dlx") ? r.count : r.delivered;
  printf("{\"scenario\": ");
  json_str(name);
  printf(", \"count\": %ld, \"delivered\": %ld, \"seconds\": %.6f", r.count, r.delivered, r.seconds);
  if (r.seconds > 0) {
    printf(", \"msgs_per_s\": %.1f, \"cpu_s\": %.4f, \"cpu_pct\": %.1f", counted / r.seconds, r.cpu_s,
           100 * r.cpu_s / r.seconds);
  }
  printf(", \"proc_cpu_s\": %.4f, \"proc_s\": %.4f, \"writes\": %ld, \"reads\": %ld, \"batch\": %d, \"reader\": ",
         cpu_now(), now() - start, n_writes, n_reads, opt.batch);
  json_str(opt.reader);
  if (!strncmp(name, "backlog-", 8)) {
    printf(", \"t_first\": %.6f, \"t_last\": %.6f, \"publishers\": %d, \"window\": %d, \"prefetch\": %d, "
           "\"ack_every\": %d, \"events_lost\": %d, \"events\": [",
           t_first, t_last, opt.publishers, opt.window, opt.prefetch, opt.ack_every, n_events_lost);
    for (int i = 0; i < n_events; i++) {
      printf("%s{\"t\": %.3f, \"blocked\": %s, \"conn\": ", i ? ", " : "", events[i].t,
             events[i].blocked ? "true" : "false");
      json_str(events[i].conn);
      printf(", \"reason\": ");
      json_str(events[i].reason);
      printf("}");
    }
    printf("]");
    if (drainer != NULL) printf(", \"first_delivery\": %.6f", drainer->first_delivery);
  }
  if (err_text[0]) {
    printf(", \"error\": ");
    json_str(err_text);
  }
  printf("}\n");
  return err_text[0] ? 1 : 0;
}
