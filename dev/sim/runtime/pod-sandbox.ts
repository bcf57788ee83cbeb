/**
 * A pod's "sandbox": its own PID namespace with a private /proc, so that the
 * containers of one pod see each other's processes (the agent's signal fence finds
 * the server by name in /proc) and never those of another pod.
 *
 *   setpriv --pdeathsig KILL unshare --pid --fork --mount-proc --kill-child bash -c <pause>
 * starts the namespace's init (a childless shell that reaps orphans, like a pod's pause
 * process); each container runs as
 *   setpriv --pdeathsig KILL nsenter --target <init> --pid --mount --
 *     setpriv --reuid=U --regid=G --groups=.. --inh-caps=-all --ambient-caps=-all
 *             --bounding-set=-all,+.. [--no-new-privs] -- node <script> ...
 * i.e. with the uid, groups and capabilities a real node would give it
 * (container-identity.ts). The drop comes after nsenter, which needs CAP_SYS_ADMIN.
 * nsenter forks, so the container process is the child of the nsenter process; the
 * inner setpriv execs (no fork), so that child's PID is the container process from
 * setpriv to node: we signal that child directly (nsenter does not forward signals)
 * and nsenter exits with the child's code or signal. The kubelet signals as root, as a
 * real one does; the processes of the pod signal each other with the kernel's own
 * permission check (a uid-65532 process without CAP_KILL gets EPERM from a root one).
 *
 * Test seam (marked): `run()` wraps any command, not just an image's entrypoint;
 * sim-users.test.ts runs `node -e` probes through it to test the kernel's signal
 * permission with exactly the wrapper the kubelet uses.
 *
 * Its own /run too: a tmpfs mounted on /run in the pod's mount namespace (created by
 * `unshare --mount-proc`, private propagation), as a container has its own /run from its
 * image: pods never share sockets or locks there, nor see the host's.
 *
 * The pod's rpcbind (`rpcbind: true`, for a pod whose NFS server enables NFSv3; decided
 * by pod-rpcbind.ts): a stand-in for the pod's own network namespace, for this one
 * purpose. Sim pods share the host's network namespace, so the entrypoint's own rpcbind
 * would take the host's port 111 and clash between pods. Instead, before any container,
 * Debian's `rpcbind -f` runs as root in the pod's PID and mount namespaces but a network
 * namespace of its own:
 *   setpriv --pdeathsig KILL nsenter --target <init> --pid --mount -- unshare --net -- rpcbind -f
 * (netns-rpcbind.ts), so /run/rpcbind.sock exists in the pod, the entrypoint finds it
 * answering and starts none (server/nfs-ganesha/rpcbind.ts), ganesha registers through
 * it, and rpcbind's port 111 exists only in its namespace. It dies with the PID
 * namespace, its socket with the mount namespace. Not modelled: rpcbind on the pod's IP
 * (nothing reaches this one over the network; v3 clients are given the NFS and MOUNT
 * ports, as the preset's mount options say), the entrypoint's own rpcbind and the
 * capabilities it needs (tested outside the sim: test/integration/nfs-ganesha-rpcbind.test.ts),
 * and rpcbind as a child of the server container (here the pod's, started before it).
 *
 * Invariants: killing the init (SIGKILL) makes the kernel kill every process of the
 * namespace, so `kill()` leaves nothing behind (the pod's rpcbind included, and the
 * mount namespace with its /run goes with its last process); `--pdeathsig` and `--kill-child` tie
 * the chain to the simulator's process, so even a crashed test leaves no pod behind.
 * Needs root (unshare/nsenter of PID and mount namespaces).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { promisify } from 'node:util';
import { sleep } from '../../../lib/clock.ts';
import { LeaseholdError } from '../../../lib/errors.ts';
import { type NetnsRpcbind, startNetnsRpcbind } from '../../nfs-client/netns-rpcbind.ts';
import { type ContainerIdentity, setprivArgs } from './container-identity.ts';

// The namespace's init, like a pod's pause process: it ignores TERM/INT, has no child of
// its own (the agent's `pod` fence stops every process but PID 1 and itself, so a helper
// child here would be a target no real pod has), and reaps orphans (bash reaps any
// child on SIGCHLD). It blocks reading a pipe the simulator never writes; should the
// pipe close, it sleeps in place of itself (pdeathsig ends it then anyway).
const PAUSE = 'trap "" TERM INT; while :; do read -r _ || exec sleep infinity; done';

export interface ContainerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ContainerProcess {
  /** The container's process in the host's PID namespace (undefined until found). */
  hostPid(): number | undefined;
  /** Resolves once the container's host PID is known (undefined if it exited first). */
  readonly hostPidKnown: Promise<number | undefined>;
  readonly exited: Promise<ContainerExit>;
  signal(signal: NodeJS.Signals): void;
}

function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 4 (ppid) follows the ")" closing the command name, which may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[1]);
  } catch {
    return undefined;
  }
}

function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .map(Number)
    .filter((p) => parentOf(p) === pid);
}

async function waitForChild(pid: number, what: string, timeoutMs = 5_000): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const [child] = childrenOf(pid);
    if (child !== undefined) return child;
    await sleep(5);
  }
  throw new LeaseholdError('E_SIM_SANDBOX', `${what}: no child process of pid ${pid} after ${timeoutMs} ms`);
}

function nsOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return undefined;
  }
}

/** Mounts the pod's own /run (a tmpfs) in the mount namespace of `initPid`. */
async function mountPodRun(initPid: number): Promise<void> {
  await promisify(execFile)('nsenter', [
    '--target',
    String(initPid),
    '--mount',
    '--',
    'mount',
    '-t',
    'tmpfs',
    '-o',
    'size=4m,mode=755,nosuid,nodev',
    'leasehold-pod-run',
    '/run',
  ]);
}

export class PodSandbox {
  private readonly nsenters = new Set<ChildProcess>();
  private rpcbind: NetnsRpcbind | undefined;
  private constructor(
    readonly podKey: string,
    private readonly unshare: ChildProcess,
    private readonly initPid: number,
    private readonly namespace: string,
  ) {}

  static async start(podKey: string, opts: { rpcbind?: boolean } = {}): Promise<PodSandbox> {
    const unshare = spawn(
      'setpriv',
      [
        '--pdeathsig',
        'KILL',
        'unshare',
        '--pid',
        '--fork',
        '--mount-proc',
        '--kill-child',
        'bash',
        '-c',
        PAUSE,
      ],
      { stdio: ['pipe', 'ignore', 'ignore'] },
    );
    const failed = new Promise<never>((_, reject) => {
      unshare.once('error', (err) =>
        reject(new LeaseholdError('E_SIM_SANDBOX', `pod ${podKey}: starting unshare failed`, { cause: err })),
      );
      unshare.once('exit', (code, signal) =>
        reject(
          new LeaseholdError(
            'E_SIM_SANDBOX',
            `pod ${podKey}: unshare exited at once (code ${code}, signal ${signal}); the simulator needs root`,
          ),
        ),
      );
    });
    failed.catch(() => {});
    const pid = unshare.pid;
    if (pid === undefined) return failed;
    const initPid = await Promise.race([waitForChild(pid, `pod ${podKey} sandbox`), failed]);
    // The child of unshare is the namespace's init once it has exec'd the shell.
    let namespace = nsOf(initPid);
    const deadline = performance.now() + 5_000;
    while ((namespace === undefined || namespace === nsOf(process.pid)) && performance.now() < deadline) {
      await sleep(5);
      namespace = nsOf(initPid);
    }
    if (namespace === undefined || namespace === nsOf(process.pid)) {
      unshare.kill('SIGKILL');
      throw new LeaseholdError(
        'E_SIM_SANDBOX',
        `pod ${podKey}: the sandbox init ${initPid} never entered a new PID namespace`,
      );
    }
    unshare.removeAllListeners('exit');
    const sandbox = new PodSandbox(podKey, unshare, initPid, namespace);
    try {
      await mountPodRun(initPid);
      if (opts.rpcbind) sandbox.rpcbind = await sandbox.startRpcbind();
    } catch (err) {
      await sandbox.kill();
      throw new LeaseholdError('E_SIM_SANDBOX', `pod ${podKey}: preparing the sandbox failed`, {
        cause: err,
      });
    }
    return sandbox;
  }

  private startRpcbind(): Promise<NetnsRpcbind> {
    const init = String(this.initPid);
    return startNetnsRpcbind({
      what: `pod ${this.podKey}`,
      argv: ['setpriv', '--pdeathsig', 'KILL', 'nsenter', '--target', init, '--pid', '--mount', '--'].concat([
        'unshare',
        '--net',
        '--',
        'rpcbind',
        '-f',
      ]) as [string, ...string[]],
      socket: () => `/proc/${init}/root/run/rpcbind.sock`,
    });
  }

  /**
   * Starts one container process in the namespace as `identity`; stdout and stderr go
   * to logPath (opened here, as root: the container writes to inherited descriptors,
   * as to a runtime's pipes, and never needs access to the file itself).
   */
  run(
    command: string,
    args: readonly string[],
    env: Record<string, string>,
    logPath: string,
    identity: ContainerIdentity,
  ): ContainerProcess {
    const log = openSync(logPath, 'a');
    let child: ChildProcess;
    try {
      child = spawn(
        'setpriv',
        [
          '--pdeathsig',
          'KILL',
          'nsenter',
          '--target',
          String(this.initPid),
          '--pid',
          '--mount',
          '--',
          'setpriv',
          ...setprivArgs(identity),
          '--',
          command,
          ...args,
        ],
        { env, stdio: ['ignore', log, log] },
      );
    } finally {
      closeSync(log);
    }
    this.nsenters.add(child);
    let hostPid: number | undefined;
    const exited = new Promise<ContainerExit>((resolve) => {
      child.once('error', () => resolve({ code: 127, signal: null }));
      child.once('exit', (code, signal) => {
        this.nsenters.delete(child);
        resolve({ code, signal });
      });
    });
    const nsenterPid = child.pid;
    const hostPidKnown: Promise<number | undefined> =
      nsenterPid === undefined
        ? Promise.resolve(undefined)
        : waitForChild(nsenterPid, `pod ${this.podKey} container ${args[0] ?? command}`).then(
            (pid) => (hostPid = pid),
            () => undefined,
          );
    return {
      hostPid: () => hostPid,
      hostPidKnown,
      exited,
      signal: (signal) => {
        // NB: signalling nsenter instead would kill it and orphan the container.
        void hostPidKnown.then((pid) => {
          try {
            if (pid !== undefined) process.kill(pid, signal);
            else child.kill(signal);
          } catch {
            // already gone
          }
        });
      },
    };
  }

  /** Host PIDs of every process in the pod's namespace (init included). */
  processes(): number[] {
    return readdirSync('/proc')
      .filter((e) => /^\d+$/.test(e))
      .map(Number)
      .filter((p) => nsOf(p) === this.namespace);
  }

  private nsenterPids(): number[] {
    const pids = [...this.nsenters].map((c) => c.pid).filter((p) => p !== undefined);
    // The rpcbind's nsenter parent stops and continues like a container's.
    return this.rpcbind ? [...pids, this.rpcbind.pid] : pids;
  }

  private static signal(pids: readonly number[], signal: NodeJS.Signals): void {
    for (const pid of pids) {
      try {
        process.kill(pid, signal);
      } catch {
        // exited meanwhile
      }
    }
  }

  /**
   * Freeze: SIGSTOP every process of the pod's namespace.
   * NB: each nsenter parent sees its child stop and stops itself (that is how nsenter
   * forwards job control), so it must be continued too on thaw, or it would never
   * reap its child and report the container's exit.
   */
  freeze(): void {
    PodSandbox.signal(this.processes(), 'SIGSTOP');
  }

  /** Thaw: SIGCONT the namespace, then the nsenter parents (again shortly after, see freeze). */
  thaw(): void {
    PodSandbox.signal(this.processes(), 'SIGCONT');
    PodSandbox.signal(this.nsenterPids(), 'SIGCONT');
    for (const delay of [100, 500, 2_000]) {
      setTimeout(() => PodSandbox.signal(this.nsenterPids(), 'SIGCONT'), delay).unref();
    }
  }

  /** SIGKILLs the namespace (and with it every container); resolves when unshare has exited. */
  async kill(): Promise<void> {
    const exitOf = (c: ChildProcess) =>
      new Promise<void>((resolve) =>
        c.exitCode !== null || c.signalCode !== null ? resolve() : c.once('exit', () => resolve()),
      );
    const nsenters = [...this.nsenters];
    // Each nsenter parent must live to reap its container: a container whose parent
    // died first stays a zombie until the host's init gets to it. A parent stopped by
    // a freeze is continued first, and killed only if it does not exit in time.
    PodSandbox.signal(this.nsenterPids(), 'SIGCONT');
    PodSandbox.signal([this.initPid, ...this.processes()], 'SIGKILL');
    this.unshare.kill('SIGKILL');
    await exitOf(this.unshare);
    const reaped = await Promise.race([
      Promise.all([...nsenters.map(exitOf), this.rpcbind?.exited]).then(() => true),
      sleep(2_000).then(() => false),
    ]);
    if (!reaped) {
      PodSandbox.signal(this.nsenterPids(), 'SIGKILL');
      await Promise.all([...nsenters.map(exitOf), this.rpcbind?.exited]);
    }
    const deadline = performance.now() + 5_000;
    while (this.processes().length > 0 && performance.now() < deadline) await sleep(20);
  }
}
