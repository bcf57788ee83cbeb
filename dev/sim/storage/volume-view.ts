/**
 * One node's view of one volume: a leasehold-fencefs process (dev/fuse/) serving a
 * passthrough FUSE mount of the volume's backing directory at `mountpoint`; with
 * `ext4` (the block kind, block-image.ts) it also mounts the ext4 image in that
 * directory through the view (a loop device over the view's file) at `ext4.mountpoint`,
 * which is then what the node's pods use.
 * Guarantees: `mount()` resolves once the mount is live; `revoke()` resolves only after
 * the filesystem confirmed the cut (every later operation through the mount, also on
 * descriptors already open and from processes that were stopped, fails with EIO);
 * `close()` detaches the mount (MNT_DETACH) and ends the process, SIGKILL and a lazy
 * unmount after 5 s (and a lazy unmount of a mount a dead process left: the file system
 * first, then the view). The process has a parent-death signal and exits on stdin EOF, so a
 * killed simulator leaves no mount and no process behind.
 * Not guaranteed: a revoked view stays mounted (answering EIO) until close(), as a
 * fenced node keeps its dead device; mmap'ed writes are not modelled.
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

/** What a view served and refused (dev/fuse/revocable.go Stats); times CLOCK_MONOTONIC ms. */
export interface ViewStats {
  /** Data writes served (write, writev, copy_file_range, fallocate). */
  writes: number;
  firstWriteMonoMs: number | undefined;
  lastWriteMonoMs: number | undefined;
  /** Requests answered EIO after the revoke. */
  refused: number;
  revoked: boolean;
}

export class VolumeView {
  private lastStats: ViewStats | undefined;
  private readonly lines: string[] = [];
  private waiter: (() => void) | undefined;
  private stderr = '';
  private exited = false;
  private readonly exit: Promise<void>;

  private constructor(
    private readonly proc: ChildProcessWithoutNullStreams,
    readonly mountpoint: string,
    /** Where the ext4 file system is mounted (block kind), else undefined. */
    readonly fsMountpoint: string | undefined,
  ) {
    createInterface({ input: proc.stdout }).on('line', (line) => {
      this.lines.push(line);
      this.waiter?.();
    });
    // EPIPE when it died: its exit (below) is what counts.
    proc.stdin.on('error', () => {});
    proc.stderr.on('data', (b: Buffer) => {
      this.stderr = (this.stderr + b.toString()).slice(-2_000);
    });
    this.exit = new Promise((resolve) =>
      proc.on('exit', () => {
        this.exited = true;
        this.waiter?.();
        resolve();
      }),
    );
  }

  static async mount(
    bin: string,
    backing: string,
    mountpoint: string,
    opts: { ext4?: { image: string; mountpoint: string }; timeoutMs?: number } = {},
  ): Promise<VolumeView> {
    const args = ['--backing', backing, '--mountpoint', mountpoint];
    if (opts.ext4) args.push('--ext4-image', opts.ext4.image, '--fs-mountpoint', opts.ext4.mountpoint);
    const proc = spawn(bin, args, { stdio: 'pipe' });
    const view = new VolumeView(proc, mountpoint, opts.ext4?.mountpoint);
    const what = opts.ext4
      ? `mount ${opts.ext4.image} of ${backing} at ${opts.ext4.mountpoint} through the view at ${mountpoint}`
      : `mount the view of ${backing} at ${mountpoint}`;
    try {
      await view.expect('ready', opts.timeoutMs ?? 10_000, what);
    } catch (err) {
      await view.close();
      throw err;
    }
    return view;
  }

  /**
   * NB: a leasehold-fencefs that has exited counts as revoked: the kernel aborts a FUSE
   * connection whose server is gone, and every operation on it fails (ENOTCONN).
   */
  async revoke(timeoutMs = 10_000): Promise<void> {
    if (this.exited) return;
    this.proc.stdin.write('revoke\n');
    await this.expect('revoked', timeoutMs, `revoke the view at ${this.mountpoint}`, true);
  }

  /**
   * What the view served and refused so far; after its process exited, the last stats
   * read (undefined when none was).
   */
  async stats(timeoutMs = 10_000): Promise<ViewStats | undefined> {
    if (this.exited) return this.lastStats;
    this.proc.stdin.write('stats\n');
    const line = await this.expect(
      (l) => l.startsWith('stats '),
      timeoutMs,
      `read the stats of ${this.mountpoint}`,
    );
    const raw = JSON.parse(line.slice('stats '.length)) as {
      writes: number;
      firstWriteMonoNs: number;
      lastWriteMonoNs: number;
      refused: number;
      revoked: boolean;
    };
    this.lastStats = {
      writes: raw.writes,
      firstWriteMonoMs: raw.firstWriteMonoNs > 0 ? raw.firstWriteMonoNs / 1e6 : undefined,
      lastWriteMonoMs: raw.lastWriteMonoNs > 0 ? raw.lastWriteMonoNs / 1e6 : undefined,
      refused: raw.refused,
      revoked: raw.revoked,
    };
    return this.lastStats;
  }

  async close(): Promise<void> {
    if (!this.exited) this.proc.stdin.end();
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 5_000);
    await this.exit;
    clearTimeout(timer);
    // A process that died (SIGKILL) never detached its mounts: the dead connection stays.
    const mounted = new Set(
      readFileSync('/proc/mounts', 'utf8')
        .split('\n')
        .map((l) => l.split(' ')[1]),
    );
    for (const m of [this.fsMountpoint, this.mountpoint])
      if (m !== undefined && mounted.has(m)) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
  }

  private async expect(
    line: string | ((l: string) => boolean),
    timeoutMs: number,
    what: string,
    exitIsDone = false,
  ): Promise<string> {
    const deadline = performance.now() + timeoutMs;
    const matches = typeof line === 'string' ? (l: string) => l === line : line;
    for (;;) {
      const i = this.lines.findIndex(matches);
      if (i >= 0) return this.lines.splice(i, 1)[0] as string;
      if (this.exited && exitIsDone) return '';
      if (this.exited)
        throw new Error(`${what}: leasehold-fencefs exited (${this.proc.exitCode}): ${this.stderr.trim()}`);
      const left = deadline - performance.now();
      if (left <= 0)
        throw new Error(
          `${what}: no ${typeof line === 'string' ? `"${line}"` : 'such line'} from leasehold-fencefs within ${timeoutMs} ms`,
        );
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.waiter = undefined;
    }
  }
}
