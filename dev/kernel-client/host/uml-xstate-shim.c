/*
 * LD_PRELOAD shim for User-Mode Linux kernels older than the fix of their FP-state size
 * (Debian 12's user-mode-linux 6.1 among them) on hosts whose XSAVE area is larger than
 * UML's fixed buffer, such as CPUs with AMX (Sapphire Rapids and later).
 *
 * Why: such a UML saves a guest task's FP state with PTRACE_GETREGSET(NT_X86_XSTATE)
 * into a buffer of its own fixed size (the host kernel truncates a read to it, which
 * works) and restores it with PTRACE_SETREGSET from the same buffer. The host kernel
 * accepts a set only with the whole XSAVE area of the host's size
 * (arch/x86/kernel/fpu/regset.c xstateregs_set: `count != fpu_user_cfg.max_size`
 * returns -EFAULT), so the first restore fails, UML logs "userspace - ptrace set fp
 * regs failed, errno = 14" and kills init: the kernel never boots.
 *
 * What it does: a PTRACE_SETREGSET(NT_X86_XSTATE) whose buffer is shorter than the
 * host's XSAVE area reads the task's whole current area, overlays the caller's bytes
 * on its start (legacy area, XSAVE header, AVX), and sets the whole area. Everything
 * else passes through unchanged.
 *
 * What this does not preserve: state past UML's buffer (AVX-512 opmask and upper
 * ZMM registers, AMX tiles) is not saved per guest task; it keeps whatever the host
 * process holds. UML runs each guest address space in a host process of its own, so
 * a single-threaded guest program keeps its own; two threads of one guest process
 * switching on one host process could see each other's AVX-512 upper state. The
 * testbed's guest programs are single-threaded C and the shell.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif
/* Larger than any x86 XSAVE area today (AMX: about 11 KiB). */
#define XSAVE_MAX (64 * 1024)

typedef long (*ptrace_fn)(int, pid_t, void *, void *);

long ptrace(enum __ptrace_request request, ...) {
  static ptrace_fn real;
  if (!real) real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
  va_list ap;
  va_start(ap, request);
  pid_t pid = va_arg(ap, pid_t);
  void *addr = va_arg(ap, void *);
  void *data = va_arg(ap, void *);
  va_end(ap);
  if (request == PTRACE_SETREGSET && (long)addr == NT_X86_XSTATE && data != NULL) {
    static __thread unsigned char *whole;
    struct iovec *given = data;
    if (whole == NULL) whole = aligned_alloc(64, XSAVE_MAX);
    struct iovec all = {whole, XSAVE_MAX};
    if (whole != NULL && real(PTRACE_GETREGSET, pid, addr, &all) == 0 && all.iov_len > given->iov_len) {
      memcpy(whole, given->iov_base, given->iov_len);
      return real(PTRACE_SETREGSET, pid, addr, &all);
    }
  }
  return real(request, pid, addr, data);
}
