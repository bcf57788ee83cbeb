/**
 * The imperative shell around nfs-writer: builds it (build.sh, cached by source hash),
 * starts it against one NFS address, parses its stdout into events as they come, and
 * stops it. Decisions live in writer-lines.ts (parsing) and write-analysis.ts (what the
 * run means).
 *
 * Guarantees: no child is left behind: `stop()` sends SIGTERM and, if the writer has not
 * exited within `stopTimeoutMs`, SIGKILL; this process's exit kills a writer still
 * running. A stdout line that does not parse is kept in `badLines` (never dropped) and
 * stderr is kept for error messages. Options are validated before anything starts.
 *
 * Not guaranteed: the writer reaches the server (it retries forever, like a hard mount:
 * watch its error events).
 */
import { type ChildProcess, execFile, type SpawnOptions, spawn } from 'node:child_process';
import { join } from 'node:path';
import { parseWriterLine, type WriterEvent, type WriterExit, WriterLineError } from './writer-lines.ts';

const BUILD_SCRIPT = join(import.meta.dirname, 'build.sh');

export interface WriterOptions {
  /** 3, or 4 for NFSv4.0 (libnfs 4.0 speaks no other minor version). */
  version: 3 | 4;
  host: string;
  port: number;
  /** NFSv3 MOUNT port (required with version 3: no portmapper is asked). */
  mountPort?: number;
  /** The export's path (NFSv4 pseudo path, NFSv3 mount path). */
  exportPath: string;
  file: string;
  writerId?: number;
  /** Bytes per record, 48 to 3072 (libnfs's NFSv4 writes fail above ~3.9 KB). Default 64. */
  recordSize?: number;
  /** Pause between acknowledged records. Default 20 ms. */
  intervalMs?: number;
  /** Per-call timeout (like timeo), whole seconds in ms. Default 2000. */
  timeoutMs?: number;
  /** First and longest reconnect backoff (doubles in between). Default 100 and 1000 ms. */
  backoffMs?: number;
  backoffMaxMs?: number;
  /** Records to write before exiting by itself; 0 (default) until stopped. */
  count?: number;
  /** How long stop() waits after SIGTERM before SIGKILL. Default 5000 ms. */
  stopTimeoutMs?: number;
}

export interface WriterProcess {
  pid: number;
  events: WriterEvent[];
  badLines: WriterLineError[];
  stderr(): string;
  /** Resolves once an ack with seq >= `seq` was seen (rejects on exit or timeout). */
  waitForAck(seq: number, timeoutMs: number): Promise<void>;
  /** Resolves once `n` more acks than now were seen. */
  waitForMoreAcks(n: number, timeoutMs: number): Promise<void>;
  /** SIGTERM, then SIGKILL after stopTimeoutMs; resolves with the exit line if printed. */
  stop(): Promise<WriterExit | undefined>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export class WriterError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** Builds nfs-writer if its source changed; resolves with the binary's path. */
export function buildWriter(): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('bash', [BUILD_SCRIPT], { encoding: 'utf8', timeout: 120_000 }, (err, stdout, stderr) => {
      if (err)
        reject(
          new WriterError(
            'E_WRITER_BUILD',
            `building nfs-writer (${BUILD_SCRIPT}) failed: ${stderr.trim()}`,
            { cause: err },
          ),
        );
      else resolve(stdout.trim());
    });
  });
}

/** Checks options: a list of problems, each naming the option and the rule. */
export function writerOptionProblems(o: WriterOptions): string[] {
  const problems: string[] = [];
  const int = (name: string, v: number | undefined, min: number, max: number) => {
    if (v !== undefined && (!Number.isInteger(v) || v < min || v > max))
      problems.push(`${name}=${v}: must be an integer from ${min} to ${max}`);
  };
  if (o.version !== 3 && o.version !== 4) problems.push(`version=${o.version}: must be 3 or 4`);
  if (o.host === '') problems.push('host: must not be empty');
  int('port', o.port, 1, 65535);
  if (o.version === 3 && o.mountPort === undefined) problems.push('mountPort: required with version 3');
  int('mountPort', o.mountPort, 1, 65535);
  if (!o.exportPath.startsWith('/')) problems.push(`exportPath=${o.exportPath}: must be absolute`);
  if (o.file === '' || o.file.includes('/')) problems.push(`file=${o.file}: must be a plain file name`);
  int('recordSize', o.recordSize, 48, 3072);
  int('intervalMs', o.intervalMs, 0, 60_000);
  int('timeoutMs', o.timeoutMs, 1000, 600_000);
  if (o.timeoutMs !== undefined && o.timeoutMs % 1000 !== 0)
    problems.push(`timeoutMs=${o.timeoutMs}: must be whole seconds (libnfs 4.0)`);
  int('backoffMs', o.backoffMs, 1, 60_000);
  int('backoffMaxMs', o.backoffMaxMs, 1, 600_000);
  if ((o.backoffMaxMs ?? 1000) < (o.backoffMs ?? 100)) problems.push('backoffMaxMs: must be >= backoffMs');
  int('count', o.count, 0, 1_000_000_000);
  return problems;
}

/**
 * How the writer's process is started: `spawn` by default; e.g. a real node's
 * `spawnInNetwork` (dev/node/node.ts) to run it in that node's network namespace. It
 * must return the writer's own process (its pid, exit and signals), stdout and stderr piped.
 */
export type WriterLauncher = (argv: readonly string[], opts: SpawnOptions) => ChildProcess;
const spawnHere: WriterLauncher = (argv, opts) => spawn(argv[0] as string, argv.slice(1), opts);

export function startWriter(
  binary: string,
  o: WriterOptions,
  launch: WriterLauncher = spawnHere,
): WriterProcess {
  const problems = writerOptionProblems(o);
  if (problems.length > 0)
    throw new WriterError('E_WRITER_OPTIONS', `nfs-writer options: ${problems.join('; ')}`);
  const args = [
    ['--version', o.version],
    ['--host', o.host],
    ['--port', o.port],
    ['--mount-port', o.mountPort],
    ['--export', o.exportPath],
    ['--file', o.file],
    ['--writer-id', o.writerId],
    ['--record-size', o.recordSize],
    ['--interval-ms', o.intervalMs],
    ['--timeout-ms', o.timeoutMs],
    ['--backoff-ms', o.backoffMs],
    ['--backoff-max-ms', o.backoffMaxMs],
    ['--count', o.count],
  ].flatMap(([flag, value]) => (value === undefined ? [] : [String(flag), String(value)]));
  const child: ChildProcess = launch([binary, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const killOnExit = () => child.kill('SIGKILL');
  process.on('exit', killOnExit);

  const events: WriterEvent[] = [];
  const badLines: WriterLineError[] = [];
  const waiters = new Set<() => void>();
  const wake = () => {
    for (const w of [...waiters]) w();
  };
  let stderr = '';
  let buffer = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
      const parsed = parseWriterLine(buffer.slice(0, nl));
      buffer = buffer.slice(nl + 1);
      if (parsed instanceof WriterLineError) badLines.push(parsed);
      else events.push(parsed);
    }
    wake();
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  let done = false;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    // 'close', not 'exit': stdout is read to its end first, so the exit line is never missed.
    child.once('close', (code, signal) => {
      done = true;
      process.off('exit', killOnExit);
      resolve({ code, signal });
      wake();
    });
  });

  const acks = () => events.filter((e) => e.event === 'ack');
  const waitFor = (what: string, ok: () => boolean, timeoutMs: number) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (ok()) finish(resolve);
        else if (done)
          finish(() =>
            reject(
              new WriterError(
                'E_WRITER_EXITED',
                `nfs-writer exited before ${what}; stderr: ${stderr.trim()}`,
              ),
            ),
          );
      };
      const timer = setTimeout(
        () =>
          finish(() =>
            reject(new WriterError('E_WRITER_TIMEOUT', `nfs-writer: no ${what} within ${timeoutMs} ms`)),
          ),
        timeoutMs,
      );
      const finish = (then: () => void) => {
        clearTimeout(timer);
        waiters.delete(check);
        then();
      };
      waiters.add(check);
      check();
    });

  return {
    pid: child.pid as number,
    events,
    badLines,
    stderr: () => stderr,
    exited,
    waitForAck: (seq, timeoutMs) =>
      waitFor(`ack of record ${seq}`, () => acks().some((a) => a.seq >= seq), timeoutMs),
    waitForMoreAcks: (n, timeoutMs) => {
      const target = acks().length + n;
      return waitFor(`${n} more acks`, () => acks().length >= target, timeoutMs);
    },
    stop: async () => {
      if (!done) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), o.stopTimeoutMs ?? 5000);
        await exited;
        clearTimeout(timer);
      }
      return events.find((e): e is WriterExit => e.event === 'exit');
    },
  };
}
