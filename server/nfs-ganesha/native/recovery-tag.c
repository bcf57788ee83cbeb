/*
 * LD_PRELOAD shim for ganesha.nfsd (NFS-Ganesha 4.3 to 6.x, fs and fs_ng recovery
 * backends): the NFSv4 client's recovery record is named after the client's identity
 * (its co_ownerid) alone, not also after the address the server saw it connect from.
 *
 * Why: ganesha names a client's recovery record "<client address>-(<len>:<co_ownerid>)"
 * (src/SAL/recovery/recovery_fs.c fs_create_clid_name) and, after a restart, lets a
 * client reclaim its opens and locks only if the record of its *current* address exists.
 * A share's clients reach it through a Service's ClusterIP, and kube-proxy on the
 * client's node masquerades that traffic to the address of the interface towards the
 * pod: the node's address while the server runs on another node, the pod bridge's while
 * it runs on the client's own node. A failover that moves the server onto or off a
 * client's node thus changes the client's address: its reclaims are refused
 * (NFS4ERR_NO_GRACE), its locks are lost, and nothing lifts the grace period early (the
 * old record never reclaims). No ganesha option leaves the address out.
 *
 * What it does: ganesha builds that name with one snprintf call whose format is exactly
 * "%s-(%s:%s)" (address, length, owner); a call with that format gets "_" instead of
 * the address (shorter than any address: the buffer ganesha sized for it fits). Every
 * other call passes through to glibc. The owner string alone is the identity NFSv4
 * defines (RFC 8881 2.4: the co_ownerid); Linux clients put their host name (or
 * nfs4_unique_id) in it.
 *
 * Not guaranteed: that a future ganesha still uses this format (the entrypoint's
 * integration test reads the record's name back and fails if the address is in it).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define RECOV_TAG_FORMAT "%s-(%s:%s)"
#define ADDRESS_STANDIN "_"

extern int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *format, va_list ap);

static int is_recov_tag(const char *format) { return format != NULL && strcmp(format, RECOV_TAG_FORMAT) == 0; }

/* The record name without the address; vsnprintf, which this shim does not wrap. */
static int put_tag(char *s, size_t maxlen, ...) {
  va_list ap;
  va_start(ap, maxlen);
  int n = vsnprintf(s, maxlen, RECOV_TAG_FORMAT, ap);
  va_end(ap);
  return n;
}

/* The record name from ganesha's own arguments (address, length, owner), the address left out. */
static int put_tag_from(char *s, size_t maxlen, va_list ap) {
  (void)va_arg(ap, const char *);
  const char *len = va_arg(ap, const char *);
  const char *owner = va_arg(ap, const char *);
  return put_tag(s, maxlen, ADDRESS_STANDIN, len, owner);
}

int snprintf(char *s, size_t maxlen, const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  int n = is_recov_tag(format) ? put_tag_from(s, maxlen, ap) : vsnprintf(s, maxlen, format, ap);
  va_end(ap);
  return n;
}

int __snprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  int n = is_recov_tag(format) ? put_tag_from(s, maxlen, ap) : __vsnprintf_chk(s, maxlen, flag, slen, format, ap);
  va_end(ap);
  return n;
}
