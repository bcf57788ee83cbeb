/**
 * Which signals are pending for a process, from its /proc/<pid>/status (SigPnd: the
 * thread's, ShdPnd: the thread group's; hex masks, bit `signo - 1`).
 *
 * Why the testbed asks: a process with SIGKILL pending never runs user code again (the
 * kernel takes the signal on its way back to user space, and a frozen task leaves the
 * freezer on that path). A real node's power-off kills its frozen processes, then thaws
 * them so that they die; until they are reaped they still show in /proc, and the
 * never-two check (real-share.ts GaneshaTracker) must not count such a dying ganesha
 * as serving. Not guaranteed: anything about work the kernel still finishes for it
 * (an I/O in flight): that is the storage's fence, not this.
 */
import { readFileSync } from 'node:fs';

/** Whether `signo` is pending in a /proc/<pid>/status text (pure). */
export function signalPendingIn(status: string, signo: number): boolean {
  return ['SigPnd', 'ShdPnd'].some((k) => {
    const hex = new RegExp(`^${k}:\\s*([0-9a-f]+)$`, 'm').exec(status)?.[1] ?? '0';
    return (BigInt(`0x${hex}`) & (1n << BigInt(signo - 1))) !== 0n;
  });
}

/** Whether `signo` is pending for `pid`; undefined when the process is gone. */
export function signalPending(pid: number, signo: number): boolean | undefined {
  try {
    return signalPendingIn(readFileSync(`/proc/${pid}/status`, 'utf8'), signo);
  } catch {
    return undefined;
  }
}

export const SIGKILL = 9;
export const SIGTERM = 15;
