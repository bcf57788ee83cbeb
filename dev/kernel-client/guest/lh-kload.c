/*
 * lh-kload: the workloads that run inside the User-Mode Linux guest on a kernel NFS
 * mount (build: ../build-guest.sh). Each prints one line per event on stdout, the
 * guest's console, which it shares with the kernel and other workloads; the host
 * timestamps each line as it arrives (workload-lines.ts parses them).
 *
 *  - Every line is `<tag> <kind> [fields]\n`, built in a buffer and written with ONE
 *    write(2): lines of concurrent processes on one console never interleave. The tag
 *    (`[a-z][a-z0-9-]*`, at most 64 characters) tells the workloads apart.
 *  - In `err` lines, n is the number the workload is trying to reach: the record (write),
 *    the file (create) or the attempt (read, lockio, probe) whose success line would
 *    carry it; 0 in lock mode before the lock is held. ERRNAME is the symbolic errno
 *    (EIO, ESTALE, EAGAIN, ... or E<number> for one outside errno_name's table); op is
 *    the call that failed: open write fsync read lock lockio setlk unlock mkdir create.
 *  - Modes (intervalMs 0..3600000, recordSize 64..65536):
 *      write  <tag> <path> <intervalMs> <recordSize>   ack <seq> | err <seq> <E> <op>
 *        record seq (1, 2, ...) at offset (seq - 1) * recordSize, pwrite then fsync;
 *        acked only when both succeed; on failure the SAME seq is retried after the
 *        interval (so a retried record lands at its own offset, never twice).
 *      read   <tag> <path> <intervalMs> <recordSize>   read <n> | err <n> <E> <op>
 *        O_DIRECT pread of recordSize rounded up to 4096 at offset 0: every read goes to
 *        the server, not the page cache. n counts successful reads.
 *      lock   <tag> <path> <intervalMs>                locked, lockio <n> | err <n> <E> <op>
 *        F_SETLKW write lock on byte 0 (held until exit), then 1 byte written at offset
 *        1 and fsynced through the same fd each interval (the Linux client fails I/O on
 *        an fd whose lock was lost with EIO).
 *      probe  <tag> <path> <intervalMs>                denied <n> | granted <n> | err <n> <E> <op>
 *        F_SETLK write lock on byte 0 each interval (attempt n); EAGAIN/EACCES = denied;
 *        granted is unlocked at once.
 *      create <tag> <dir> <intervalMs>                 created <n> | err <n> <E> <op>
 *        dir/f-<n> (n = 1, 2, ...) created with O_EXCL, write-locked (F_SETLK, a new
 *        lock), 16 bytes written, closed (which releases the lock).
 *      verify <tag> <path> <count> <recordSize>        verified <count> | bad <seq> <reason>
 *        records 1..count read back and compared; exit 0, or 1 at the first bad one
 *        (reason short-read, mismatch or the read's ERRNAME; an open that fails is
 *        record 1's ERRNAME). count 0 verifies nothing and opens nothing.
 *  - Record seq is recordSize bytes: "lh-kload seq=%010u\n", then 'a' + seq % 26 up to
 *    the last byte, which is '\n' (workload-analysis.ts expectedRecord is the same).
 *  - SIGTERM/SIGINT: `<tag> exit`, exit 0. The handler only sets a flag (no SA_RESTART,
 *    so a sleep or a blocked F_SETLKW returns EINTR); a call cut short by it prints no
 *    err line.
 *  - Bad arguments: usage on stderr naming the argument, exit 2.
 *
 * NB: a call blocked on a hard mount whose server is gone does not return on SIGTERM
 * (the kernel's NFS waits are killable, not interruptible): the exit line comes when the
 * call does. The host stops a workload with SIGKILL after a deadline.
 * NB: write mode keeps its fd: after ESTALE it fails forever, as an application that
 * does not reopen would (that is what the analysis should see). A create retried after
 * an error that meets EEXIST (its earlier create reached the server, the reply was lost)
 * rewrites the file without O_EXCL, so it counts as created only once complete.
 *
 * Not guaranteed: a line reaches the host (a console can drop output under load); seq
 * wraps after 2^32 - 1 records; one writer per file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define TAG_MAX 64
#define RECORD_MIN 64
#define RECORD_MAX 65536
#define INTERVAL_MAX 3600000L
#define DIRECT_ALIGN 4096

static volatile sig_atomic_t stop_requested = 0;
static const char *tag = "lh-kload";

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  /* Interrupted by SIGTERM: return at once, the loop checks stop_requested. */
  nanosleep(&ts, NULL);
}

/* The errnos a file system (NFS in particular) returns, by name. */
#define E(e) {e, #e}
static const struct {
  int number;
  const char *name;
} errno_names[] = {
    E(EPERM), E(ENOENT), E(EINTR), E(EIO), E(ENXIO), E(EBADF), E(EAGAIN), E(ENOMEM), E(EACCES),
    E(EBUSY), E(EEXIST), E(EXDEV), E(ENOTDIR), E(EISDIR), E(EINVAL), E(ENFILE), E(EMFILE),
    E(ETXTBSY), E(EFBIG), E(ENOSPC), E(EROFS), E(EMLINK), E(EPIPE), E(EDEADLK), E(ENAMETOOLONG),
    E(ENOLCK), E(ENOSYS), E(ENOTEMPTY), E(ELOOP), E(EOVERFLOW), E(EREMOTEIO), E(EOPNOTSUPP),
    E(ENOTCONN), E(ECONNREFUSED), E(ECONNRESET), E(ECONNABORTED), E(ENETUNREACH),
    E(EHOSTUNREACH), E(EHOSTDOWN), E(ETIMEDOUT), E(ESTALE), E(EDQUOT), E(ENOMEDIUM),
    E(ECANCELED), E(EKEYEXPIRED),
};
#undef E

/* The symbolic name of errno e, or "E<e>" in fallback for one outside the table. */
static const char *errno_name(int e, char *fallback, size_t size) {
  for (size_t i = 0; i < sizeof errno_names / sizeof errno_names[0]; i++)
    if (errno_names[i].number == e) return errno_names[i].name;
  snprintf(fallback, size, "E%d", e);
  return fallback;
}

/* Prints `<tag> <fmt...>\n` with one write(2). */
__attribute__((format(printf, 1, 2))) static void emit(const char *fmt, ...) {
  char line[256];
  int n = snprintf(line, sizeof line, "%s ", tag);
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2; /* cannot happen: tag and fields are bounded */
  line[n++] = '\n';
  /* NB: a console or pipe takes a line this short whole; the loop is for the odd partial write. */
  for (int off = 0; off < n;) {
    ssize_t w = write(STDOUT_FILENO, line + off, (size_t)(n - off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += (int)w;
  }
}

/* An err line for errno e, unless the call was cut short by our own SIGTERM. */
static void emit_err(unsigned n, int e, const char *op) {
  if (stop_requested && e == EINTR) return;
  char fallback[16];
  emit("err %u %s %s", n, errno_name(e, fallback, sizeof fallback), op);
}

static int finish(void) {
  emit("exit");
  return 0;
}

static void fill_record(char *buf, size_t size, uint32_t seq) {
  /* NB: main checks the size; this tells gcc 12 (whose -Wstringop-overflow otherwise sees
   * a 0-byte buffer) the range. */
  if (size < RECORD_MIN || size > RECORD_MAX) abort();
  memset(buf, (int)('a' + seq % 26), size);
  int n = snprintf(buf, size, "lh-kload seq=%010u\n", (unsigned)seq);
  buf[n] = (char)('a' + seq % 26); /* snprintf's terminator */
  buf[size - 1] = '\n';
}

/* pwrite of all len bytes; -1 with errno on failure. A pwrite that writes nothing and
 * reports no error (never seen on a regular file) is reported as EIO. */
static int pwrite_all(int fd, const char *buf, size_t len, off_t off) {
  for (size_t done = 0; done < len;) {
    ssize_t w = pwrite(fd, buf + done, len - done, off + (off_t)done);
    if (w < 0) return -1;
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    done += (size_t)w;
  }
  return 0;
}

/* pread of up to len bytes (less only at end of file); the count, or -1 with errno. */
static ssize_t pread_all(int fd, char *buf, size_t len, off_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t r = pread(fd, buf + done, len - done, off + (off_t)done);
    if (r < 0) return -1;
    if (r == 0) break;
    done += (size_t)r;
  }
  return (ssize_t)done;
}

static int run_write(const char *path, long interval_ms, size_t record_size) {
  char *buf = malloc(record_size);
  if (!buf) return 1;
  int fd = -1;
  uint32_t seq = 1;
  while (!stop_requested) {
    if (fd < 0 && (fd = open(path, O_RDWR | O_CREAT, 0644)) < 0) {
      emit_err(seq, errno, "open");
      sleep_ms(interval_ms);
      continue;
    }
    fill_record(buf, record_size, seq);
    if (pwrite_all(fd, buf, record_size, (off_t)(seq - 1) * (off_t)record_size) < 0) {
      emit_err(seq, errno, "write");
    } else if (fsync(fd) < 0) {
      emit_err(seq, errno, "fsync");
    } else {
      emit("ack %u", (unsigned)seq);
      seq++;
    }
    sleep_ms(interval_ms);
  }
  free(buf);
  return finish();
}

static int run_read(const char *path, long interval_ms, size_t record_size) {
  size_t len = (record_size + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
  void *buf = NULL;
  if (posix_memalign(&buf, DIRECT_ALIGN, len) != 0) return 1;
  int fd = -1;
  unsigned reads = 0;
  while (!stop_requested) {
    if (fd < 0 && (fd = open(path, O_RDONLY | O_DIRECT)) < 0) {
      emit_err(reads + 1, errno, "open");
    } else if (fd >= 0) {
      /* NB: one pread, not pread_all: O_DIRECT wants aligned offsets, and a short read is
       * the end of the file, which is a successful round trip all the same. */
      if (pread(fd, buf, len, 0) < 0) {
        emit_err(reads + 1, errno, "read");
      } else {
        reads++;
        emit("read %u", reads);
      }
    }
    sleep_ms(interval_ms);
  }
  free(buf);
  return finish();
}

static int set_lock(int fd, int cmd, short type) {
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
  return fcntl(fd, cmd, &fl);
}

static int run_lock(const char *path, long interval_ms) {
  int fd = -1;
  while (!stop_requested) {
    if (fd < 0 && (fd = open(path, O_RDWR | O_CREAT, 0644)) < 0) {
      emit_err(0, errno, "open");
    } else if (fd >= 0) {
      if (set_lock(fd, F_SETLKW, F_WRLCK) == 0) break;
      emit_err(0, errno, "lock");
    }
    sleep_ms(interval_ms);
  }
  if (stop_requested) return finish();
  emit("locked");
  unsigned done = 0;
  sleep_ms(interval_ms);
  while (!stop_requested) {
    const char byte = 'x';
    if (pwrite_all(fd, &byte, 1, 1) < 0 || fsync(fd) < 0) {
      emit_err(done + 1, errno, "lockio");
    } else {
      done++;
      emit("lockio %u", done);
    }
    sleep_ms(interval_ms);
  }
  /* No unlock: exit (or the kernel, on SIGKILL) releases the lock. */
  return finish();
}

static int run_probe(const char *path, long interval_ms) {
  int fd = -1;
  unsigned attempt = 0;
  while (!stop_requested) {
    attempt++;
    if (fd < 0 && (fd = open(path, O_RDWR | O_CREAT, 0644)) < 0) {
      emit_err(attempt, errno, "open");
    } else if (fd >= 0) {
      if (set_lock(fd, F_SETLK, F_WRLCK) == 0) {
        emit("granted %u", attempt);
        if (set_lock(fd, F_SETLK, F_UNLCK) < 0) emit_err(attempt, errno, "unlock");
      } else if (errno == EAGAIN || errno == EACCES) {
        emit("denied %u", attempt);
      } else {
        emit_err(attempt, errno, "setlk");
      }
    }
    sleep_ms(interval_ms);
  }
  return finish();
}

/*
 * One attempt at dir/f-<n>: create, lock, write, close. 0, or -1 with errno and *op the
 * call that failed. The lock is a new one (a LOCK the server refuses during grace, like
 * the OPEN); close releases it.
 */
static int create_file(const char *file, unsigned n, int retry, const char **op) {
  char body[17];
  snprintf(body, sizeof body, "f-%013u\n", n);
  *op = "create";
  int fd = open(file, O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0 && errno == EEXIST && retry) fd = open(file, O_WRONLY | O_TRUNC);
  if (fd < 0) return -1;
  if (set_lock(fd, F_SETLK, F_WRLCK) < 0) {
    int e = errno;
    *op = "lock";
    close(fd);
    errno = e;
    return -1;
  }
  int rc = pwrite_all(fd, body, 16, 0);
  int e = errno;
  /* close flushes to the server (close-to-open): its error is the create's. */
  if (close(fd) < 0 && rc == 0) return -1;
  errno = e;
  return rc;
}

static int run_create(const char *dir, long interval_ms) {
  char file[PATH_MAX];
  while (!stop_requested && mkdir(dir, 0755) < 0 && errno != EEXIST) {
    emit_err(1, errno, "mkdir");
    sleep_ms(interval_ms);
  }
  unsigned n = 1;
  int retry = 0;
  while (!stop_requested) {
    snprintf(file, sizeof file, "%s/f-%u", dir, n);
    const char *op;
    if (create_file(file, n, retry, &op) < 0) {
      emit_err(n, errno, op);
      retry = 1;
    } else {
      emit("created %u", n);
      n++;
      retry = 0;
    }
    sleep_ms(interval_ms);
  }
  return finish();
}

static int run_verify(const char *path, uint32_t count, size_t record_size) {
  char fallback[16];
  if (count == 0) {
    emit("verified 0");
    return 0;
  }
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    emit("bad 1 %s", errno_name(errno, fallback, sizeof fallback));
    return 1;
  }
  char *want = malloc(record_size);
  char *got = malloc(record_size);
  if (!want || !got) return 1;
  for (uint32_t seq = 1; seq <= count; seq++) {
    if (stop_requested) return finish();
    ssize_t r = pread_all(fd, got, record_size, (off_t)(seq - 1) * (off_t)record_size);
    if (r < 0) {
      emit("bad %u %s", (unsigned)seq, errno_name(errno, fallback, sizeof fallback));
      return 1;
    }
    if ((size_t)r < record_size) {
      emit("bad %u short-read", (unsigned)seq);
      return 1;
    }
    fill_record(want, record_size, seq);
    if (memcmp(want, got, record_size) != 0) {
      emit("bad %u mismatch", (unsigned)seq);
      return 1;
    }
    if (seq == UINT32_MAX) break;
  }
  emit("verified %u", (unsigned)count);
  free(want);
  free(got);
  close(fd);
  return 0;
}

static void usage(const char *why) {
  fprintf(stderr,
          "lh-kload: %s\n"
          "usage: lh-kload write|read <tag> <path> <intervalMs> <recordSize>\n"
          "       lh-kload lock|probe <tag> <path> <intervalMs>\n"
          "       lh-kload create <tag> <dir> <intervalMs>\n"
          "       lh-kload verify <tag> <path> <count> <recordSize>\n"
          "  tag: [a-z][a-z0-9-]*, at most %d characters; intervalMs 0..%ld;\n"
          "  recordSize %d..%d; count 0..4294967295\n",
          why, TAG_MAX, INTERVAL_MAX, RECORD_MIN, RECORD_MAX);
  exit(2);
}

static unsigned long parse_number(const char *name, const char *value, unsigned long min,
                                  unsigned long max) {
  char *end = NULL;
  errno = 0;
  unsigned long v = strtoul(value, &end, 10);
  if (errno || !end || *end || value[0] < '0' || value[0] > '9' || v < min || v > max) {
    char why[256];
    snprintf(why, sizeof why, "%s=%.64s: expected an integer from %lu to %lu", name, value, min,
             max);
    usage(why);
  }
  return v;
}

static void check_tag(const char *t) {
  size_t len = strlen(t);
  int ok = len >= 1 && len <= TAG_MAX && t[0] >= 'a' && t[0] <= 'z';
  for (size_t i = 1; ok && i < len; i++)
    ok = (t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '-';
  if (!ok) {
    char why[256];
    snprintf(why, sizeof why, "tag=%.80s: expected [a-z][a-z0-9-]*, at most %d characters", t,
             TAG_MAX);
    usage(why);
  }
}

static void check_path(const char *name, const char *p) {
  /* Room for create's "/f-4294967295". */
  if (!p[0] || strlen(p) > PATH_MAX - 16) {
    char why[256];
    snprintf(why, sizeof why, "%s=%.64s: expected a non-empty path shorter than %d bytes", name, p,
             PATH_MAX - 16);
    usage(why);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) usage("mode is missing");
  const char *mode = argv[1];
  int with_size = !strcmp(mode, "write") || !strcmp(mode, "read") || !strcmp(mode, "verify");
  int without_size = !strcmp(mode, "lock") || !strcmp(mode, "probe") || !strcmp(mode, "create");
  if (!with_size && !without_size) {
    char why[128];
    snprintf(why, sizeof why, "mode=%.32s: expected write, read, lock, probe, create or verify",
             mode);
    usage(why);
  }
  int want = with_size ? 6 : 5;
  if (argc != want) {
    char why[128];
    snprintf(why, sizeof why, "%s takes %d arguments after the mode, got %d", mode, want - 2,
             argc - 2);
    usage(why);
  }
  check_tag(argv[2]);
  tag = argv[2];
  check_path(!strcmp(mode, "create") ? "dir" : "path", argv[3]);
  int verify = !strcmp(mode, "verify");
  unsigned long number = verify ? parse_number("count", argv[4], 0, UINT32_MAX)
                                : parse_number("intervalMs", argv[4], 0, INTERVAL_MAX);
  size_t record_size =
      with_size ? (size_t)parse_number("recordSize", argv[5], RECORD_MIN, RECORD_MAX) : 0;

  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal; /* no SA_RESTART: sleeps and F_SETLKW return EINTR */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  long interval_ms = (long)number;
  if (!strcmp(mode, "write")) return run_write(argv[3], interval_ms, record_size);
  if (!strcmp(mode, "read")) return run_read(argv[3], interval_ms, record_size);
  if (!strcmp(mode, "lock")) return run_lock(argv[3], interval_ms);
  if (!strcmp(mode, "probe")) return run_probe(argv[3], interval_ms);
  if (!strcmp(mode, "create")) return run_create(argv[3], interval_ms);
  return run_verify(argv[3], (uint32_t)number, record_size);
}
