/**
 * Holding a real node's kubelet (RealNode.holdKubelet): SIGSTOP to the kubelet process
 * alone, found by its name among the processes of the node's pid namespace. Everything
 * else on the node runs on (containerd, the running containers, kube-proxy, the API
 * link). A held kubelet does nothing: a pod bound to the node is never started (no
 * sandbox, no container), no status, no probe, no heartbeat (the Node turns NotReady
 * after the node-monitor grace). For the e2e scenario of a replacement whose node dies
 * before it could start.
 *
 * Guarantees: holdProcess returns only once the kernel reports the process stopped
 * (/proc/<pid>/stat state `T`), else throws E_NODE_HOLD naming the pid and what it saw.
 * Not guaranteed: a release; a crash's SIGKILL (or the node's stop) ends the held
 * kubelet, which is how the scenarios end it. NB: the kubelet's parent, the boot's
 * `nsenter` (util-linux), stops itself when its child stops (it passes job control
 * on) and stays stopped after the child's death: whoever kills a held kubelet must
 * SIGCONT that parent so that it reaps the child and exits (node.ts does). NB: SIGSTOP stops every thread of the
 * process at once; what the kubelet had in flight (a CRI call) completes in containerd.
 */
import { readFileSync } from 'node:fs';
import { LeaseholdError } from '../../lib/errors.ts';

/** A process as /proc/<pid>/stat shows it: its name (comm), state letter and parent. */
export interface ProcStat {
  pid: number;
  comm: string;
  state: string;
  ppid: number;
}

/** Parses /proc/<pid>/stat (pure): comm may hold spaces and parentheses, so split at the last ')'. */
export function parseProcStat(pid: number, text: string): ProcStat | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  const [state = '', ppid = ''] = text.slice(close + 2).split(' ');
  return state === '' ? undefined : { pid, comm: text.slice(open + 1, close), state, ppid: Number(ppid) };
}

/** The one process named `kubelet` (pure): undefined when none, an error when two. */
export function kubeletOf(processes: readonly ProcStat[]): ProcStat | undefined {
  const found = processes.filter((p) => p.comm === 'kubelet');
  if (found.length > 1)
    throw new LeaseholdError(
      'E_NODE_HOLD',
      `two kubelet processes in one node's pid namespace: ${found.map((p) => p.pid).join(', ')}`,
    );
  return found[0];
}

export function readProcStat(pid: number): ProcStat | undefined {
  try {
    return parseProcStat(pid, readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined; // gone
  }
}

/** SIGSTOPs `pid` and waits (up to `timeoutMs`) until the kernel shows it stopped (state T). */
export async function holdProcess(pid: number, timeoutMs = 5_000): Promise<void> {
  try {
    process.kill(pid, 'SIGSTOP');
  } catch (err) {
    throw new LeaseholdError('E_NODE_HOLD', `SIGSTOP to pid ${pid} failed`, { cause: err });
  }
  const deadline = performance.now() + timeoutMs;
  let seen = readProcStat(pid);
  while (seen?.state !== 'T' && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    seen = readProcStat(pid);
  }
  if (seen?.state !== 'T')
    throw new LeaseholdError(
      'E_NODE_HOLD',
      `pid ${pid} not stopped ${timeoutMs} ms after SIGSTOP: ${seen ? `state ${seen.state}` : 'gone'}`,
    );
}
