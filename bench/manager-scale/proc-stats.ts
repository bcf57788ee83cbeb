/** CPU time and RSS of a process from /proc (Linux only). */
import { readFile } from 'node:fs/promises';

const TICKS_PER_SECOND = 100; // sysconf(_SC_CLK_TCK) on Linux

export async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may contain spaces) start after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return (utime + stime) / TICKS_PER_SECOND;
}

export async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

/** PIDs of processes whose command line mentions `needle` (e.g. a cluster's temp dir). */
export async function pidsMentioning(needle: string): Promise<number[]> {
  const { readdir } = await import('node:fs/promises');
  const out: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if ((await readFile(`/proc/${entry}/cmdline`, 'utf8')).includes(needle)) out.push(Number(entry));
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}
