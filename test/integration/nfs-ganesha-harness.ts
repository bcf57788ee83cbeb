/**
 * Test harness for the shipped NFS server (not a test file): spawns the compiled
 * entrypoint (dist/server/nfs-ganesha/main.js) on 127.0.0.1 and a free port over a temp
 * export, collects its JSON lines and ganesha's raw lines, and runs libnfs's user-space
 * clients (nfs-cp, nfs-cat; Debian libnfs-utils) against it. No kernel NFS client, no
 * mount. Everything started here is stopped by `cleanup()`: the entrypoint's process
 * group and the ganesha and private message bus it logged, SIGKILLed if still there.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const NFS_MAIN = join(import.meta.dirname, '../../dist/server/nfs-ganesha/main.js');

export interface ServerLine {
  msg: string;
  atMs: number;
  [key: string]: unknown;
}

export interface NfsServerProcess {
  child: ChildProcess;
  /** The entrypoint's JSON lines. */
  lines: ServerLine[];
  /** ganesha's own lines (and anything else that is not JSON), stdout and stderr. */
  raw: string[];
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; atMs: number }>;
  waitForLog(msg: string, timeoutMs?: number): Promise<ServerLine>;
  /** ganesha's pid, from the `ganesha started` line. */
  ganeshaPid(): number | undefined;
}

const started: Array<() => Promise<void>> = [];

export async function cleanup(): Promise<void> {
  for (const stop of started.splice(0).reverse()) await stop().catch(() => {});
}

export async function tempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `leasehold-nfs-${prefix}-`));
  started.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** The testbed's one free-port picker (outside the ephemeral range; see its header). */
export { freePort } from '../../dev/net/free-port.ts';

/** True while `pid` runs (a zombie counts as gone: it serves nothing and holds no port). */
export function processRuns(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\d+ \(.*\) Z /.test(stat);
  } catch {
    return false;
  }
}

/**
 * Spawns `node dist/server/nfs-ganesha/main.js` with exactly `env` plus PATH; `wrapper`
 * (a command that execs its arguments, so the child stays the entrypoint) goes first.
 */
export function spawnNfsServer(
  env: Record<string, string>,
  wrapper: readonly string[] = [],
): NfsServerProcess {
  if (!existsSync(NFS_MAIN)) throw new Error(`${NFS_MAIN} is missing: run tsc -p tsconfig.build.json first`);
  const argv = [...wrapper, process.execPath, NFS_MAIN];
  const child = spawn(argv[0] as string, argv.slice(1), {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const lines: ServerLine[] = [];
  const raw: string[] = [];
  const waiters: Array<() => void> = [];
  let stderr = '';
  let buffer = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
      const text = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      try {
        lines.push({ ...(JSON.parse(text) as ServerLine), atMs: performance.now() });
      } catch {
        raw.push(text);
      }
    }
    for (const wake of waiters.splice(0)) wake();
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; atMs: number }>(
    (resolve) =>
      child.once('exit', (code, signal) => {
        resolve({ code, signal, atMs: performance.now() });
        for (const wake of waiters.splice(0)) wake();
      }),
  );
  const ganeshaPid = () => {
    const pid = lines.find((l) => l.msg === 'ganesha started')?.ganeshaPid;
    return typeof pid === 'number' ? pid : undefined;
  };
  started.push(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-(child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
      await exited;
    }
    // ganesha and the metrics' private bus run in process groups of their own: kill them
    // by pid if they outlived the entrypoint (a SIGKILL runs none of its exit hooks).
    const bus = lines.find((l) => l.msg === 'private message bus started')?.dbusPid;
    for (const pid of [ganeshaPid(), typeof bus === 'number' ? bus : undefined])
      if (pid !== undefined && processRuns(pid)) process.kill(pid, 'SIGKILL');
  });
  const waitForLog = async (msg: string, timeoutMs = 20_000): Promise<ServerLine> => {
    const until = performance.now() + timeoutMs;
    for (;;) {
      const found = lines.find((l) => l.msg === msg);
      if (found) return found;
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(
          `nfs server exited (${child.exitCode ?? child.signalCode}) before logging "${msg}"; lines: ${lines.map((l) => l.msg).join(' | ')}; stderr: ${stderr}`,
        );
      const left = until - performance.now();
      if (left <= 0)
        throw new Error(
          `nfs server did not log "${msg}" within ${timeoutMs} ms; raw: ${raw.slice(-10).join('\n')}`,
        );
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  };
  return { child, lines, raw, stderr: () => stderr, exited, waitForLog, ganeshaPid };
}

export interface ToolResult {
  code: number | null;
  stdout: Buffer;
  stderr: string;
  ms: number;
}

/** Runs a libnfs tool with a timeout; never throws on a non-zero exit. */
export function runNfsTool(tool: 'nfs-cp' | 'nfs-cat' | 'nfs-ls', args: string[]): Promise<ToolResult> {
  const startedAt = performance.now();
  return new Promise((resolve) => {
    execFile(
      tool,
      args,
      { encoding: 'buffer', timeout: 15_000, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
        resolve({ code, stdout, stderr: stderr.toString('utf8'), ms: performance.now() - startedAt });
      },
    );
  });
}

/** libnfs URL of `name` in the export; libnfs 4.0's NFSv4 client speaks v4.0 only. */
export function nfsUrl(port: number, pseudoPath: string, name = ''): string {
  return `nfs://127.0.0.1${pseudoPath}${name === '' ? '' : `/${name}`}?version=4&nfsport=${port}`;
}
