/**
 * A Linux kernel NFS client as a machine of its own: a User-Mode Linux kernel
 * (kernels.ts: Debian's 6.1, or 6.12 built from Debian's source) booted with the
 * host's root read-only, its `eth0` a TAP device in a real node's network namespace
 * (dev/node). So its traffic to a Service's ClusterIP enters the node as a pod's or
 * the node's own would, through the node's kube-proxy (DNAT to the serving pod, on this
 * node or across the fabric, and masquerade: the client's address is outside the
 * cluster's pod range, as a node's own kernel mounting a volume for its pods is).
 *
 *   const kc = await startKernelClient(sys.node('real-2'), { name: 'kc-1', index: 1, kernel: '6.1' });
 *   await kc.run(`mount -t nfs -o vers=4.2 ${ip}:/export /run/mnt`);
 *   kc.start('w', '/path/lh-kload write w /run/mnt/w.bin 20 4096');
 *   await kc.stop();   // halts it, removes its TAP, throws if anything is left
 *
 * Every console line is kept with the host's CLOCK_MONOTONIC time at its arrival
 * (`lines`, monotonicMs: the clock of the testbed's serving windows and faults): the
 * guest's programs (lh-kload's tagged lines), the guest kernel's own messages (`nfs:
 * server ... not responding`), and the answers to the host's commands (guest-init.ts).
 *
 * Process model: the kernel runs under `unshare --pid --fork --kill-child` started by
 * the node's spawnInNetwork, so UML's host processes (one per guest address space, its
 * I/O helpers) are one pid namespace whose init is UML: a SIGKILL to the spawned
 * process ends all of them (the kill-child death signal reaches the namespace's init,
 * and the kernel kills the rest). It is the node's process: the node's crash and stop
 * kill it, as a node's kernel dies with the node; this test process's death kills it
 * (spawnInNetwork's pdeathsig).
 *
 * Guarantees: startKernelClient resolves once the guest printed `@ready` (network up,
 * NFS client loaded), or rejects with the console's last lines, having removed what it
 * made. stop() is idempotent: it halts the guest (SIGKILL after 5 s), deletes the TAP
 * when the node's namespace is still there, removes the machine's directory, and then
 * checks that no process whose command line names the machine's directory is left
 * (KernelClientLeftoverError). Not guaranteed: any timing of the guest kernel (it is a
 * UML kernel, scheduled by the host like any process: its timers run late under load);
 * an NFS mount inside a pod (no kubelet here can mount an `nfs` volume: the host
 * kernel has no NFS client; the guest mounts the same source with the same options).
 */
import { type ChildProcess, execFile, type SpawnOptions } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { HALT_LINE, renderGuestInit, runLine, startLine, stopLine } from './guest-init.ts';
import { type KernelName, type UmlKernel, umlKernel } from './kernels.ts';

const exec = promisify(execFile);

/** What of a real node the client needs (RealNode has it). */
export interface KernelClientHost {
  readonly name: string;
  readonly netnsPath: string | undefined;
  spawnInNetwork(argv: readonly string[], opts?: SpawnOptions): ChildProcess;
}

export interface KernelClientOptions {
  /** The guest's host name and the machine's name in messages (a DNS label). */
  name: string;
  /** 1..250, unique among the clients of one node: the TAP `lhkc<index>` and 10.202.<index>.0/30. */
  index: number;
  kernel: KernelName;
  /** Guest memory (default 256 MiB). */
  memMb?: number;
  /** How long the boot may take up to `@ready` (default 60 s). */
  bootTimeoutMs?: number;
  /** Each console line as it arrives (for progress output). */
  onLine?: (line: ConsoleLine) => void;
}

export interface ConsoleLine {
  /** CLOCK_MONOTONIC ms on the host when the line arrived. */
  atMs: number;
  text: string;
}

export interface KernelClient {
  readonly name: string;
  readonly node: string;
  readonly kernel: UmlKernel;
  /** The guest's address (before the node's masquerade). */
  readonly address: string;
  readonly lines: readonly ConsoleLine[];
  /** Runs `command` in the guest's shell; resolves with its output lines, rejects on rc != 0 or timeout. */
  run(command: string, timeoutMs?: number): Promise<string[]>;
  /** Starts `command` in the background under `tag` (its output straight to the console). */
  start(tag: string, command: string): void;
  /** SIGTERM to the background command under `tag`. */
  signalStop(tag: string): void;
  /** Resolves with the first line from `fromIndex` on that matches, rejects after `timeoutMs`. */
  waitForLine(match: (text: string) => boolean, timeoutMs: number, fromIndex?: number): Promise<ConsoleLine>;
  /** Halts the machine, removes its TAP and directory, runs the leftover check. Idempotent. */
  stop(): Promise<void>;
  readonly exited: Promise<void>;
}

export class KernelClientLeftoverError extends LeaseholdError {
  constructor(name: string, leftovers: readonly string[]) {
    super('E_KCLIENT_LEFTOVERS', `kernel client ${name} left behind: ${leftovers.join('; ')}`);
  }
}

export const tapOf = (index: number) => `lhkc${index}`;
export const guestAddressOf = (index: number) => `10.202.${index}.2`;
export const gatewayOf = (index: number) => `10.202.${index}.1`;

export async function startKernelClient(
  host: KernelClientHost,
  opts: KernelClientOptions,
): Promise<KernelClient> {
  if (!Number.isInteger(opts.index) || opts.index < 1 || opts.index > 250)
    throw new LeaseholdError(
      'E_KCLIENT_INDEX',
      `kernel client ${opts.name}: index ${opts.index} must be 1..250`,
    );
  const kernel = await umlKernel(opts.kernel);
  const netns = host.netnsPath;
  if (!netns)
    throw new LeaseholdError(
      'E_KCLIENT_NODE',
      `kernel client ${opts.name}: node ${host.name} has no network namespace (crashed or stopped)`,
    );
  const tap = tapOf(opts.index);
  const address = guestAddressOf(opts.index);
  const dir = await mkdtemp(join(tmpdir(), `leasehold-kc-${opts.name}-`));
  const initPath = join(dir, 'init.sh');
  await writeFile(
    initPath,
    renderGuestInit({
      hostname: opts.name,
      address,
      gateway: gatewayOf(opts.index),
      ...(kernel.moduleDir ? { moduleDir: kernel.moduleDir } : {}),
    }),
    { mode: 0o755 },
  );
  const inNetns = (args: string[]) => exec('nsenter', [`--net=${netns}`, '--', 'ip', ...args]);
  try {
    await inNetns(['tuntap', 'add', 'dev', tap, 'mode', 'tap']);
    await inNetns(['addr', 'add', `${gatewayOf(opts.index)}/30`, 'dev', tap]);
    await inNetns(['link', 'set', tap, 'up']);
  } catch (err) {
    await inNetns(['link', 'del', tap]).catch(() => {});
    await rm(dir, { recursive: true, force: true });
    throw new LeaseholdError(
      'E_KCLIENT_TAP',
      `kernel client ${opts.name}: setting up TAP ${tap} in ${host.name}'s network namespace failed (another client with index ${opts.index}?): ${(err as { stderr?: string }).stderr?.trim() ?? String(err)}`,
      { cause: err },
    );
  }

  const lines: ConsoleLine[] = [];
  const waiters = new Set<() => void>();
  const child = host.spawnInNetwork(
    [
      'unshare',
      '--pid',
      '--fork',
      '--kill-child',
      '--',
      'env',
      `LD_PRELOAD=${kernel.shim}`,
      `TMPDIR=${existsSync('/dev/shm') ? '/dev/shm' : dir}`,
      kernel.binary,
      `mem=${opts.memMb ?? 256}M`,
      'root=/dev/root',
      'rootfstype=hostfs',
      'rootflags=/',
      'ro',
      `init=${initPath}`,
      `eth0=tuntap,${tap}`,
      'con=null',
      'con0=fd:0,fd:1',
      `umid=${opts.name}`,
      `uml_dir=${dir}`,
      // Messages up to NOTICE on the console: the NFS client's "not responding" and "OK".
      'loglevel=6',
    ],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-8192);
  });
  let partial = '';
  child.stdout?.on('data', (d: Buffer) => {
    const atMs = monotonicMs();
    const parts = (partial + d.toString()).split('\n');
    partial = parts.pop() ?? '';
    for (const raw of parts) {
      const line = { atMs, text: raw.replace(/\r$/, '') };
      lines.push(line);
      opts.onLine?.(line);
    }
    for (const wake of [...waiters]) wake();
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let gone = false;
  void exited.then(() => {
    gone = true;
    for (const wake of [...waiters]) wake();
  });

  function send(text: string): void {
    if (gone || !child.stdin?.writable)
      throw new LeaseholdError(
        'E_KCLIENT_GONE',
        `kernel client ${opts.name} is not running: cannot send ${text.trim()}`,
      );
    child.stdin.write(text);
  }

  function waitForLine(
    match: (text: string) => boolean,
    timeoutMs: number,
    fromIndex = 0,
  ): Promise<ConsoleLine> {
    return new Promise((resolve, reject) => {
      let next = fromIndex;
      const check = () => {
        for (; next < lines.length; next++) {
          const line = lines[next] as ConsoleLine;
          if (match(line.text)) return done(undefined, line);
        }
        if (gone) done(new LeaseholdError('E_KCLIENT_GONE', `kernel client ${opts.name} exited`));
      };
      const timer = setTimeout(
        () =>
          done(
            new LeaseholdError(
              'E_KCLIENT_TIMEOUT',
              `kernel client ${opts.name}: no such line within ${timeoutMs} ms`,
            ),
          ),
        timeoutMs,
      );
      const done = (err?: Error, line?: ConsoleLine) => {
        clearTimeout(timer);
        waiters.delete(check);
        if (err) reject(err);
        else resolve(line as ConsoleLine);
      };
      waiters.add(check);
      check();
    });
  }

  const tail = () =>
    lines
      .slice(-25)
      .map((l) => `  ${l.text}`)
      .join('\n');
  let requests = 0;
  async function run(command: string, timeoutMs = 30_000): Promise<string[]> {
    const id = ++requests;
    const from = lines.length;
    send(runLine(id, command));
    let done: ConsoleLine;
    try {
      done = await waitForLine((t) => t.startsWith(`@done ${id} `), timeoutMs, from);
    } catch (err) {
      throw new LeaseholdError(
        'E_KCLIENT_RUN',
        `kernel client ${opts.name}: '${command}' did not finish: ${String(err)}`,
        {
          cause: err,
        },
      );
    }
    const out = lines
      .slice(from)
      .filter((l) => l.text.startsWith(`@out ${id} `))
      .map((l) => l.text.slice(`@out ${id} `.length));
    const rc = Number(done.text.split(' ')[2]);
    if (rc !== 0)
      throw new LeaseholdError(
        'E_KCLIENT_RUN',
        `kernel client ${opts.name}: '${command}' exited ${rc}:\n${out.map((o) => `  ${o}`).join('\n')}`,
      );
    return out;
  }

  let stopping: Promise<void> | undefined;
  function stop(): Promise<void> {
    stopping ??= (async () => {
      if (!gone) {
        try {
          send(HALT_LINE);
        } catch {
          // gone meanwhile
        }
        await Promise.race([exited, sleep(5_000)]);
        if (!gone) child.kill('SIGKILL');
        await Promise.race([exited, sleep(5_000)]);
      }
      // The node's namespace outlives a client (a crashed node's took the TAP with it).
      const netnsNow = host.netnsPath;
      if (netnsNow)
        await exec('nsenter', [`--net=${netnsNow}`, '--', 'ip', 'link', 'del', tap]).catch(() => {});
      const left: string[] = [];
      for (let i = 0; i < 50; i++) {
        left.length = 0;
        left.push(...processesNaming(dir));
        if (left.length === 0) break;
        await sleep(100);
      }
      if (
        netnsNow &&
        (await exec('nsenter', [`--net=${netnsNow}`, '--', 'ip', 'link', 'show', tap]).then(
          () => true,
          () => false,
        ))
      )
        left.push(`TAP ${tap} in ${host.name}'s network namespace`);
      await rm(dir, { recursive: true, force: true });
      if (left.length > 0) throw new KernelClientLeftoverError(opts.name, left);
    })();
    return stopping;
  }

  try {
    await waitForLine((t) => t.startsWith('@ready'), opts.bootTimeoutMs ?? 60_000);
  } catch (err) {
    await stop().catch(() => {});
    throw new LeaseholdError(
      'E_KCLIENT_BOOT',
      `kernel client ${opts.name} (${kernel.name}) on ${host.name} did not boot: ${String(err)}\nconsole:\n${tail()}\nstderr: ${stderr.trim()}`,
      { cause: err },
    );
  }

  return {
    name: opts.name,
    node: host.name,
    kernel,
    address,
    lines,
    run,
    start: (tag, command) => send(startLine(tag, command)),
    signalStop: (tag) => send(stopLine(tag)),
    waitForLine,
    stop,
    exited,
  };
}

/** Host processes whose command line names `dir` (the machine's UML processes all do): the leftover check. */
export function processesNaming(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      if (cmd.includes(dir)) found.push(`process ${entry} (${cmd.slice(0, 80).trim()})`);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}
