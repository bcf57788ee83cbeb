/*
 * nfs-writer: a long-lived NFS client that appends numbered, synced records to one file
 * and logs every acknowledgement, on libnfs's C API (Debian 12 libnfs13 4.0; build:
 * build.sh beside this file). It stands in for an application on a hard NFS mount:
 *
 *  - Record n (n = 1, 2, ...) is `--record-size` bytes at offset (n - 1) * size:
 *    "leasehold-nfs seq=<n> writer=<id> " padded with '.', ending in '\n'. Writing at the
 *    record's own offset makes a retry idempotent, as a kernel client's retransmission
 *    of the same WRITE is: a retried record never appears twice.
 *  - Acknowledged = the WRITE and the COMMIT that follows it both returned OK (NFSv3
 *    WRITE UNSTABLE + COMMIT; NFSv4.0 WRITE + COMMIT via nfs_fsync). Only then is the
 *    `ack` line printed, with CLOCK_MONOTONIC milliseconds (the clock of
 *    lib/clock.ts monotonicMs, shared by every process of the machine).
 *    NB: libnfs does not show the write verifiers, so the writer cannot check that the
 *    COMMIT reached the incarnation that took the WRITE; it need not: both go over one
 *    TCP connection with libnfs's auto-reconnect off, and a server restart breaks that
 *    connection, so a WRITE + COMMIT pair that both succeed was served by one server.
 *  - Hard-mount behaviour: every call has a timeout (`--timeout-ms`, like timeo); on any
 *    failure the writer drops the connection, waits a short backoff and reconnects to
 *    the SAME host:port, mounts, re-opens the file, and retries the SAME record until it
 *    is acknowledged. It never skips a number. A connect is bounded too (one SYN
 *    retransmit: given up after about 3 s), see connect_and_open.
 *  - File handles: the handle of the first open is kept; after every reconnect the
 *    re-opened file's handle is compared with it. A different handle, or an
 *    NFS3ERR_STALE/NFS4ERR_STALE/FHEXPIRED answer, is reported as kind "stale" (a
 *    kernel client would see ESTALE on its open files).
 *  - One JSON line per event on stdout (line-buffered): start, connected, ack, error
 *    (kind: timeout | stale | grace | connection | other), exit (totals). Diagnostics
 *    go to stderr.
 *  - SIGTERM/SIGINT: finish or abandon the call under way (a blocking call is
 *    interrupted), print the exit line, exit 0.
 *
 * Not guaranteed: libnfs 4.0's NFSv4 path does not reclaim state after a server restart
 * (it opens anew, so it waits out the grace period) and fails writes above ~3.9 KB: keep
 * records small. No locking (NLM is off on the shipped server). One writer per file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nfsc/libnfs.h>

/* NB: libnfs 4.0 exports nfs_get_fh() (libnfs-raw.h) but keeps the struct private
 * (include/libnfs-private.h): this is its layout there. */
struct writer_nfs_fh {
  int len;
  char *val;
};
extern struct writer_nfs_fh *nfs_get_fh(struct nfsfh *nfsfh);

enum kind { K_TIMEOUT, K_STALE, K_GRACE, K_CONNECTION, K_OTHER, K_COUNT };
static const char *kind_names[K_COUNT] = {"timeout", "stale", "grace", "connection", "other"};

struct options {
  int version; /* 3 or 4 (NFSv4.0) */
  const char *host;
  int port;
  int mount_port;
  const char *export_path;
  const char *file;
  unsigned writer_id;
  int record_size;
  uint64_t start_seq;
  uint64_t count; /* 0: until signalled */
  int interval_ms;
  int timeout_ms;
  int backoff_ms;
  int backoff_max_ms;
};

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static double monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  /* Interrupted by SIGTERM: return at once, the loop checks stop_requested. */
  nanosleep(&ts, NULL);
}

/* Writes s as a JSON string (quotes included). */
static void json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

static void hex(char *out, const char *bytes, int len) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < len; i++) {
    out[2 * i] = digits[((unsigned char)bytes[i]) >> 4];
    out[2 * i + 1] = digits[((unsigned char)bytes[i]) & 15];
  }
  out[2 * len] = '\0';
}

/* Classifies a failed call by libnfs's error text (its errno mapping is too coarse:
 * NFSv4 GRACE, DELAY and STALE all become EIO) and the return code. */
static enum kind classify(int rc, const char *message) {
  const char *m = message ? message : "";
  if (strstr(m, "ERR_STALE") && !strstr(m, "STALE_CLIENTID") && !strstr(m, "STALE_STATEID"))
    return K_STALE;
  if (strstr(m, "FHEXPIRED") || rc == -ESTALE) return K_STALE;
  if (strstr(m, "ERR_GRACE") || strstr(m, "ERR_DELAY") || strstr(m, "ERR_JUKEBOX")) return K_GRACE;
  /* NB: libnfs 4.0's NFSv3 pwrite reports its RPC timeout as "Command was cancelled"
   * (nfs_v3.c nfs3_pwrite_mcb maps RPC_STATUS_TIMEOUT to cancel); the writer itself
   * cancels nothing before an error. */
  if (strstr(m, "timed out") || strstr(m, "timeout") || strstr(m, "was cancelled") ||
      rc == -ETIMEDOUT)
    return K_TIMEOUT;
  if (strstr(m, "onnect") || strstr(m, "ocket") || strstr(m, "Poll failed") ||
      strstr(m, "nfs_service failed") || strstr(m, "EOF") || strstr(m, "reset") ||
      rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -EPIPE)
    return K_CONNECTION;
  return K_OTHER;
}

struct state {
  struct nfs_context *nfs;
  struct nfsfh *fh;
  char *first_handle; /* hex of the first open's handle */
  uint64_t acked;
  uint64_t errors[K_COUNT];
  uint64_t stale_handles;
  uint64_t reconnects;
};

static void emit_error(struct state *st, enum kind k, const char *op, uint64_t seq, int rc,
                       const char *message) {
  /* A call cut short by our own SIGTERM (libnfs: "Poll failed") is no server error. */
  if (stop_requested) return;
  st->errors[k]++;
  if (k == K_STALE) st->stale_handles++;
  printf("{\"event\":\"error\",\"kind\":\"%s\",\"op\":\"%s\",\"seq\":%" PRIu64
         ",\"rc\":%d,\"ms\":%.3f,\"message\":",
         kind_names[k], op, seq, rc, monotonic_ms());
  json_string(stdout, message);
  printf("}\n");
}

static void disconnect(struct state *st) {
  /* NB: no close: the server may be gone, and a CLOSE would wait for the timeout.
   * Destroying the context frees the handle. */
  if (st->nfs) nfs_destroy_context(st->nfs);
  st->nfs = NULL;
  st->fh = NULL;
}

/* Connects, mounts the export and opens (creating) the file. 0 or -1 (error printed). */
static int connect_and_open(const struct options *o, struct state *st, uint64_t seq) {
  char url[1024];
  if (o->version == 3)
    snprintf(url, sizeof url, "nfs://%s%s/?version=3&nfsport=%d&mountport=%d&autoreconnect=0",
             o->host, o->export_path, o->port, o->mount_port);
  else
    snprintf(url, sizeof url, "nfs://%s%s/?version=4&nfsport=%d&autoreconnect=0", o->host,
             o->export_path, o->port);

  st->nfs = nfs_init_context();
  if (!st->nfs) {
    emit_error(st, K_OTHER, "init", seq, -ENOMEM, "nfs_init_context failed");
    return -1;
  }
  nfs_set_timeout(st->nfs, o->timeout_ms);
  /* A bounded connect, as a kernel client's (its connect timeout follows timeo): one SYN
   * retransmit (TCP_SYNCNT 1), so a connect that gets no answer fails after about 3 s and
   * the writer reconnects. libnfs's call timeout does not cover the connect: without
   * this, a reconnect begun while a Service's ClusterIP still led to a dead pod (the
   * DNAT is chosen at the SYN and conntrack keeps it) waited for the kernel to give up
   * (72 s measured on real nodes after a node crash) while the replacement served. */
  nfs_set_tcp_syncnt(st->nfs, 1);
  struct nfs_url *u = nfs_parse_url_dir(st->nfs, url);
  if (!u) {
    emit_error(st, K_OTHER, "url", seq, -EINVAL, nfs_get_error(st->nfs));
    disconnect(st);
    return -1;
  }
  /* Also set here: the URL's autoreconnect only applies after the first mount. */
  nfs_set_autoreconnect(st->nfs, 0);
  int rc = nfs_mount(st->nfs, u->server, u->path);
  nfs_destroy_url(u);
  if (rc < 0) {
    const char *m = nfs_get_error(st->nfs);
    emit_error(st, classify(rc, m), "mount", seq, rc, m);
    disconnect(st);
    return -1;
  }
  char path[512];
  snprintf(path, sizeof path, "/%s", o->file);
  /* NB: open an existing file without O_CREAT: libnfs 4.0's NFSv4 create is exclusive
   * (an existing file fails with NFS4ERR_EXIST). */
  rc = nfs_open2(st->nfs, path, O_RDWR, 0, &st->fh);
  if (rc == -ENOENT) rc = nfs_open2(st->nfs, path, O_RDWR | O_CREAT, 0644, &st->fh);
  if (rc < 0) {
    const char *m = nfs_get_error(st->nfs);
    emit_error(st, classify(rc, m), "open", seq, rc, m);
    disconnect(st);
    return -1;
  }
  struct writer_nfs_fh *h = nfs_get_fh(st->fh);
  char handle[2 * 128 + 1] = "";
  if (h && h->len > 0 && h->len <= 128) hex(handle, h->val, h->len);
  st->reconnects++;
  printf("{\"event\":\"connected\",\"seq\":%" PRIu64 ",\"ms\":%.3f,\"handle\":\"%s\"}\n", seq,
         monotonic_ms(), handle);
  if (!st->first_handle) {
    st->first_handle = strdup(handle);
  } else if (strcmp(st->first_handle, handle) != 0) {
    char message[700];
    snprintf(message, sizeof message, "file handle changed: was %s, now %s", st->first_handle,
             handle);
    emit_error(st, K_STALE, "open", seq, -ESTALE, message);
  }
  return 0;
}

static void fill_record(char *buf, int size, uint64_t seq, unsigned writer_id) {
  memset(buf, '.', (size_t)size);
  int n = snprintf(buf, (size_t)size, "leasehold-nfs seq=%" PRIu64 " writer=%u ", seq, writer_id);
  if (n >= size) n = size - 1;
  buf[n] = '.'; /* snprintf's terminator */
  buf[size - 1] = '\n';
}

/* One attempt at record seq: WRITE then COMMIT. 0 when acknowledged. */
static int write_record(const struct options *o, struct state *st, uint64_t seq, char *buf) {
  fill_record(buf, o->record_size, seq, o->writer_id);
  uint64_t offset = (seq - 1) * (uint64_t)o->record_size;
  int rc = nfs_pwrite(st->nfs, st->fh, offset, (uint64_t)o->record_size, buf);
  if (rc != o->record_size) {
    const char *m = rc < 0 ? nfs_get_error(st->nfs) : "short write";
    emit_error(st, rc < 0 ? classify(rc, m) : K_OTHER, "write", seq, rc, m);
    return -1;
  }
  rc = nfs_fsync(st->nfs, st->fh);
  if (rc < 0) {
    const char *m = nfs_get_error(st->nfs);
    emit_error(st, classify(rc, m), "commit", seq, rc, m);
    return -1;
  }
  return 0;
}

static void usage(const char *why) {
  fprintf(stderr,
          "nfs-writer: %s\n"
          "usage: nfs-writer --version 3|4 --host H --port P [--mount-port M] --export /path\n"
          "  --file NAME [--writer-id N] [--record-size B (48..3072, default 64)]\n"
          "  [--start-seq N (default 1)] [--count N (0: until SIGTERM)] [--interval-ms N]\n"
          "  [--timeout-ms N (whole seconds, default 2000)] [--backoff-ms N] [--backoff-max-ms N]\n",
          why);
  exit(2);
}

static long parse_long(const char *name, const char *value, long min, long max) {
  char *end = NULL;
  errno = 0;
  long v = strtol(value, &end, 10);
  if (errno || !end || *end || v < min || v > max) {
    char why[256];
    snprintf(why, sizeof why, "%s=%s: expected an integer from %ld to %ld", name, value, min, max);
    usage(why);
  }
  return v;
}

static void parse_args(int argc, char **argv, struct options *o) {
  *o = (struct options){.version = 0, .mount_port = 0, .writer_id = 1, .record_size = 64,
                        .start_seq = 1, .count = 0, .interval_ms = 20, .timeout_ms = 2000,
                        .backoff_ms = 100, .backoff_max_ms = 1000};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) usage("every option takes a value");
    const char *v = argv[++i];
    if (!strcmp(a, "--version"))
      o->version = (int)parse_long(a, v, 3, 4);
    else if (!strcmp(a, "--host"))
      o->host = v;
    else if (!strcmp(a, "--port"))
      o->port = (int)parse_long(a, v, 1, 65535);
    else if (!strcmp(a, "--mount-port"))
      o->mount_port = (int)parse_long(a, v, 1, 65535);
    else if (!strcmp(a, "--export"))
      o->export_path = v;
    else if (!strcmp(a, "--file"))
      o->file = v;
    else if (!strcmp(a, "--writer-id"))
      o->writer_id = (unsigned)parse_long(a, v, 0, 999999999);
    else if (!strcmp(a, "--record-size"))
      o->record_size = (int)parse_long(a, v, 48, 3072);
    else if (!strcmp(a, "--start-seq"))
      o->start_seq = (uint64_t)parse_long(a, v, 1, 1000000000L);
    else if (!strcmp(a, "--count"))
      o->count = (uint64_t)parse_long(a, v, 0, 1000000000L);
    else if (!strcmp(a, "--interval-ms"))
      o->interval_ms = (int)parse_long(a, v, 0, 60000);
    else if (!strcmp(a, "--timeout-ms"))
      o->timeout_ms = (int)parse_long(a, v, 1000, 600000);
    else if (!strcmp(a, "--backoff-ms"))
      o->backoff_ms = (int)parse_long(a, v, 1, 60000);
    else if (!strcmp(a, "--backoff-max-ms"))
      o->backoff_max_ms = (int)parse_long(a, v, 1, 600000);
    else {
      char why[256];
      snprintf(why, sizeof why, "unknown option %s", a);
      usage(why);
    }
  }
  if (!o->version) usage("--version is required");
  if (!o->host || !o->port) usage("--host and --port are required");
  if (o->version == 3 && !o->mount_port) usage("--mount-port is required with --version 3");
  if (!o->export_path || o->export_path[0] != '/') usage("--export must be an absolute path");
  if (!o->file || !o->file[0] || strchr(o->file, '/')) usage("--file must be a plain file name");
  if (o->timeout_ms % 1000) usage("--timeout-ms must be whole seconds (libnfs 4.0)");
  if (o->backoff_max_ms < o->backoff_ms) usage("--backoff-max-ms must be >= --backoff-ms");
}

int main(int argc, char **argv) {
  struct options o;
  parse_args(argc, argv, &o);
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal; /* no SA_RESTART: a blocking poll returns EINTR */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  printf("{\"event\":\"start\",\"ms\":%.3f,\"pid\":%d,\"writer\":%u,\"version\":\"%s\","
         "\"host\":",
         monotonic_ms(), (int)getpid(), o.writer_id, o.version == 3 ? "3" : "4.0");
  json_string(stdout, o.host);
  printf(",\"port\":%d,\"file\":", o.port);
  json_string(stdout, o.file);
  printf(",\"recordSize\":%d,\"startSeq\":%" PRIu64 ",\"timeoutMs\":%d,\"backoffMs\":%d,"
         "\"backoffMaxMs\":%d}\n",
         o.record_size, o.start_seq, o.timeout_ms, o.backoff_ms, o.backoff_max_ms);

  struct state st = {0};
  char *buf = malloc((size_t)o.record_size);
  if (!buf) return 1;
  uint64_t seq = o.start_seq;
  int backoff = o.backoff_ms;
  while (!stop_requested && (o.count == 0 || seq < o.start_seq + o.count)) {
    if (!st.nfs && connect_and_open(&o, &st, seq) < 0) {
      if (stop_requested) break;
      sleep_ms(backoff);
      backoff = backoff * 2 > o.backoff_max_ms ? o.backoff_max_ms : backoff * 2;
      continue;
    }
    double sent = monotonic_ms();
    if (write_record(&o, &st, seq, buf) < 0) {
      disconnect(&st);
      if (stop_requested) break;
      sleep_ms(backoff);
      backoff = backoff * 2 > o.backoff_max_ms ? o.backoff_max_ms : backoff * 2;
      continue;
    }
    st.acked++;
    printf("{\"event\":\"ack\",\"seq\":%" PRIu64 ",\"ms\":%.3f,\"sentMs\":%.3f}\n", seq,
           monotonic_ms(), sent);
    seq++;
    backoff = o.backoff_ms;
    if (o.interval_ms > 0 && !stop_requested) sleep_ms(o.interval_ms);
  }
  disconnect(&st);
  printf("{\"event\":\"exit\",\"ms\":%.3f,\"acked\":%" PRIu64 ",\"nextSeq\":%" PRIu64
         ",\"connects\":%" PRIu64 ",\"staleHandles\":%" PRIu64 ",\"errors\":{",
         monotonic_ms(), st.acked, seq, st.reconnects, st.stale_handles);
  for (int k = 0; k < K_COUNT; k++)
    printf("%s\"%s\":%" PRIu64, k ? "," : "", kind_names[k], st.errors[k]);
  printf("},\"signalled\":%s}\n", stop_requested ? "true" : "false");
  free(buf);
  free(st.first_handle);
  return 0;
}
