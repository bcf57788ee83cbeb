/*
 * LD_PRELOAD shim for ganesha.nfsd (NFS-Ganesha 4.3): during the grace period after the
 * server starts, wake ganesha's reaper every 250 ms, so that the grace period is lifted
 * within about 250 ms of the last recorded client's RECLAIM_COMPLETE instead of at the
 * reaper's next tick.
 *
 * Why: ganesha lifts grace early only from its reaper thread (reaper_run calls
 * nfs_try_lift_grace: every recorded client has sent RECLAIM_COMPLETE), which runs every
 * min(10 s, Lease_Lifetime / 2): 5 s with the shipped 10 s lease (src/MainNFSD/
 * nfs_reaper_thread.c, read from source). Until then every new OPEN and LOCK gets
 * NFS4ERR_GRACE, and Linux retries it with a doubling delay: measured on real nodes with
 * the reconnector, kernel clients wrote again 0.1 s after the replacement served but
 * created files only 6.5 s later. ganesha's own RADOS cluster backend wakes the reaper
 * the same way when the cluster's grace changes (reaper_wake() from a watch thread), so
 * the call is meant for other threads.
 *
 * What it does: a detached thread, started by this library's constructor in a process
 * named ganesha.nfsd when LEASEHOLD_NFS_GRACE_KICK_SECONDS is a positive number, calls ganesha's exported
 * reaper_wake() every 250 ms for that many seconds after the start (the entrypoint sets
 * the grace period plus the lease), and not while ganesha's exported admin_shutdown is
 * set (a shutdown destroys the reaper). Each wake runs one reaper pass: the grace check
 * and the walk of the client tables for expired leases, which only expires what the
 * normal tick would (a lease is judged by its own time, not by how often it is looked
 * at). Outside the window nothing changes.
 *
 * The thread runs with every signal blocked, so that signals reach ganesha's own signal
 * thread as without the shim.
 *
 * Not guaranteed: a wake that lands while a shutdown that began after the check destroys
 * the reaper (a window of microseconds, only within the first seconds of the server's
 * life); symbols missing (another ganesha): the thread does nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KICK_EVERY_NS 250000000L

static long window_s;

static void *kick(void *arg) {
  (void)arg;
  void (*wake)(void) = NULL;
  bool *shutting_down = NULL;
  struct timespec start, now, pause = {0, KICK_EVERY_NS};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    nanosleep(&pause, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= window_s) return NULL;
    if (wake == NULL) wake = (void (*)(void))dlsym(RTLD_DEFAULT, "reaper_wake");
    if (shutting_down == NULL) shutting_down = (bool *)dlsym(RTLD_DEFAULT, "admin_shutdown");
    if (wake == NULL || shutting_down == NULL) continue;
    if (__atomic_load_n(shutting_down, __ATOMIC_ACQUIRE)) return NULL;
    wake();
  }
}

__attribute__((constructor)) static void start_kicking(void) {
  /* Only in ganesha.nfsd itself: LD_PRELOAD reaches whatever the entrypoint starts as
   * ganesha (a wrapper such as nsenter in the tests, whose setns() into a mount namespace
   * fails with EINVAL once the process has a second thread) and anything ganesha runs. */
  if (strcmp(program_invocation_short_name, "ganesha.nfsd") != 0) return;
  const char *seconds = getenv("LEASEHOLD_NFS_GRACE_KICK_SECONDS");
  if (seconds == NULL) return;
  char *end;
  long s = strtol(seconds, &end, 10);
  if (*seconds == '\0' || *end != '\0' || s <= 0 || s > 3600) return;
  window_s = s;
  pthread_t thread;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* Every signal blocked in the thread (it inherits this mask): ganesha blocks SIGTERM,
   * SIGHUP and the rest in its own threads and takes them in one sigwait() thread; a
   * thread of ours created before that, with them unblocked, would be handed a SIGTERM
   * and the process killed by it (seen in the integration test) instead of shutting
   * down cleanly. */
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  pthread_create(&thread, &attr, kick, NULL);
  pthread_sigmask(SIG_SETMASK, &previous, NULL);
  pthread_attr_destroy(&attr);
}
