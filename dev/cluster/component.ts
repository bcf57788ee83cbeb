/**
 * One control-plane process: started in its own process group with its output in a
 * log file, waited on until ready, stopped with SIGTERM then SIGKILL.
 *
 * Guarantees: a component that exits during start, or is not ready in time, fails
 * with one line naming it and its log file. Every started component is killed when
 * this Node process exits or gets SIGINT/SIGTERM, so nothing is left behind.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request } from 'node:https';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';

export class ComponentError extends LeaseholdError {
  readonly component: string;
  readonly logPath: string;
  constructor(component: string, problem: string, logPath: string, options?: { cause?: unknown }) {
    super('E_COMPONENT', `${component} ${problem}; read ${logPath}${lastLines(logPath)}`, options);
    this.component = component;
    this.logPath = logPath;
  }

  /** True when the component's log says one of its ports was taken. */
  get portTaken(): boolean {
    try {
      return readFileSync(this.logPath, 'utf8').includes('address already in use');
    } catch {
      return false;
    }
  }
}

function lastLines(logPath: string): string {
  try {
    const lines = readFileSync(logPath, 'utf8').trimEnd().split('\n').slice(-4);
    return lines.length > 0 && lines[0] !== '' ? `\n    ${lines.join('\n    ')}` : '';
  } catch {
    return '';
  }
}

const running = new Set<ChildProcess>();
const cleanups = new Set<() => void>();
let hooksInstalled = false;

/** Registers synchronous work (e.g. removing a temp dir) for an abrupt exit; returns its undo. */
export function onAbruptExit(cleanup: () => void): () => void {
  cleanups.add(cleanup);
  return () => cleanups.delete(cleanup);
}

function killAllNow(): void {
  for (const child of running) {
    try {
      if (child.pid) process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  running.clear();
  for (const cleanup of cleanups) {
    try {
      cleanup();
    } catch {
      // best effort on the way out
    }
  }
  cleanups.clear();
}

function installExitHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  process.once('exit', killAllNow);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      killAllNow();
      process.exit(signal === 'SIGINT' ? 130 : 143);
    });
  }
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class Component {
  private child: ChildProcess | undefined;
  private exitPromise: Promise<Exit> | undefined;

  constructor(
    readonly name: string,
    private readonly bin: string,
    private readonly args: readonly string[],
    readonly logPath: string,
  ) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  start(): void {
    installExitHooks();
    const fd = openSync(this.logPath, 'a');
    try {
      // setpriv --pdeathsig: the kernel kills the component if this process dies,
      // even by SIGKILL, when no exit hook can run.
      const child = spawn('setpriv', ['--pdeathsig', 'KILL', '--', this.bin, ...this.args], {
        detached: true,
        stdio: ['ignore', fd, fd],
      });
      // A forgotten cluster must not keep its Node process alive: the exit hook kills it.
      child.unref();
      this.child = child;
      running.add(child);
      this.exitPromise = new Promise<Exit>((resolve) => {
        child.once('exit', (code, signal) => {
          running.delete(child);
          this.exit = { code, signal };
          resolve(this.exit);
        });
        child.once('error', (err) => {
          running.delete(child);
          this.spawnError = err;
          this.exit = { code: -1, signal: null };
          resolve(this.exit);
        });
      });
    } finally {
      closeSync(fd);
    }
  }

  private spawnError: Error | undefined;
  private exit: Exit | undefined;

  /** Fails, as waitReady does, when the process has exited (or could not start). */
  throwIfExited(): void {
    const exit = this.exit;
    if (!exit) return;
    const how = this.spawnError
      ? `could not start (${this.spawnError.message})`
      : `exited at start (code ${exit.code}, signal ${exit.signal})`;
    throw new ComponentError(this.name, how, this.logPath);
  }

  /** Polls `check` until it answers true; fails when the process exits or time runs out. */
  async waitReady(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
    if (!this.exitPromise) throw new ComponentError(this.name, 'was never started', this.logPath);
    const deadline = performance.now() + timeoutMs;
    while (performance.now() < deadline) {
      this.throwIfExited();
      if (await check().catch(() => false)) return;
      await sleep(200);
    }
    throw new ComponentError(
      this.name,
      `was not ready within ${Math.round(timeoutMs / 1000)}s`,
      this.logPath,
    );
  }

  /** SIGTERM to the process group, SIGKILL after `graceMs`. Idempotent. */
  async stop(graceMs = 5_000): Promise<void> {
    const child = this.child;
    const exited = this.exitPromise;
    if (!child?.pid || !exited || !running.has(child)) return;
    signalGroup(child.pid, 'SIGTERM');
    const done = await Promise.race([exited.then(() => true), sleep(graceMs).then(() => false)]);
    if (!done) {
      signalGroup(child.pid, 'SIGKILL');
      await exited;
    }
  }
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is already gone
  }
}

/**
 * True when GET `url` answers 200 (body 'ok' for /readyz-style endpoints is not required).
 * HTTPS verifies the server against `ca` (or the system's CAs): a check that accepted any
 * certificate took another cluster's component on a reused port for ours.
 */
export function httpOk(url: string, opts: { ca?: Buffer } = {}): Promise<boolean> {
  return new Promise((resolve) => {
    const u = new URL(url);
    const common = { method: 'GET', timeout: 2_000 };
    const req =
      u.protocol === 'https:'
        ? request(u, { ...common, ...(opts.ca ? { ca: opts.ca } : {}) })
        : httpRequest(u, common);
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve(false));
    req.end();
  });
}
