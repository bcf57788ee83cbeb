/**
 * What bench/agent/run.ts measures, read from outside the measured processes (never
 * from their own counters, except where a figure says "agent's own"):
 *  - memory: VmRSS (sampled every second: max and last) and VmHWM of /proc/PID/status;
 *  - CPU: utime + stime of /proc/PID/stat across the window;
 *  - start-up: from spawn() to the first stdout line matching a marker, on the bench's
 *    monotonic clock.
 * And the processes that are compared with the agent, started the same way:
 *  - bare node (the floor): `node -e 'setInterval(() => {}, 1e6)'`, which writes nothing
 *    (writing to a stdout pipe alone loads ~3 MB of stream code); its start-up is timed
 *    as `node -e 0`, spawn to exit;
 *  - the HTTPS floor: `node -e` that GETs /version from the API server every 2 s over one
 *    keep-alive connection with the same credentials; what any Node process that talks
 *    to the API server costs, before it does anything about a lease.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { get as httpGet } from 'node:http';

const CLOCK_TICKS_PER_S = 100; // USER_HZ on Linux

export interface Measured {
  name: string;
  child: ChildProcess;
  pid: number;
  lines: string[];
  /** ms from spawn to the first line containing the marker. */
  readyMs: Promise<number>;
  exited: Promise<number | null>;
}

export function start(
  name: string,
  args: readonly string[],
  env: Record<string, string>,
  readyMarker: string,
): Measured {
  const t0 = performance.now();
  const child = spawn(process.execPath, args, {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let stderr = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const readyMs = new Promise<number>((resolve, reject) => {
    let buffer = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      const at = performance.now();
      buffer += chunk;
      for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        lines.push(line);
        if (line.includes(readyMarker)) resolve(at - t0);
      }
    });
    child.stderr?.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    void exited.then((code) =>
      reject(new Error(`${name} exited ${code} before "${readyMarker}"; stderr: ${stderr}`)),
    );
  });
  readyMs.catch(() => {});
  return { name, child, pid: child.pid as number, lines, readyMs, exited };
}

export async function stop(p: Measured, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
  if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill(signal);
  return p.exited;
}

export async function cpuTicks(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
}

export function cpuPercent(ticks: number, seconds: number): number {
  return round((ticks / CLOCK_TICKS_PER_S / seconds) * 100, 3);
}

export async function memoryMB(
  pid: number,
): Promise<{ rss: number; hwm: number; anon: number; file: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN);
  const mb = (name: string) => round(kb(name) / 1024, 1);
  return { rss: mb('VmRSS'), hwm: mb('VmHWM'), anon: mb('RssAnon'), file: mb('RssFile') };
}

/** Samples VmRSS every second until stopped: the largest sample per process. */
export function sampleRss(pids: Record<string, number>): { stop(): Record<string, number> } {
  const max: Record<string, number> = {};
  const timer = setInterval(() => {
    for (const [name, pid] of Object.entries(pids)) {
      memoryMB(pid).then(
        (m) => {
          max[name] = Math.max(max[name] ?? 0, m.rss);
        },
        () => {},
      );
    }
  }, 1_000);
  return {
    stop: () => {
      clearInterval(timer);
      return max;
    },
  };
}

export const BARE_NODE_SCRIPT = 'setInterval(() => {}, 1e6)';

/** ms from spawn() to the exit of `node -e 0`. */
export async function bareNodeStartMs(): Promise<number> {
  const t0 = performance.now();
  const child = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore' });
  await new Promise((resolve) => child.once('exit', resolve));
  return performance.now() - t0;
}

/** One kubelet-style HTTP probe: a new connection, `Connection: close`. */
export function probeOnce(port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpGet(
      { host: '127.0.0.1', port, path, agent: false, headers: { connection: 'close' }, timeout: 2_000 },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
  });
}

/** CommonJS, run by `node -e` (no loader): env SERVER, CA, CERT, KEY (file paths). */
export const HTTPS_FLOOR_SCRIPT = `
const https = require('https'); const fs = require('fs');
const read = (p) => (p ? fs.readFileSync(p) : undefined);
const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: read(process.env.CA), cert: read(process.env.CERT), key: read(process.env.KEY) });
let first = true;
function once() {
  const req = https.request(new URL('/version', process.env.SERVER), { agent }, (res) => {
    const chunks = []; res.on('data', (c) => chunks.push(c));
    res.on('end', () => { JSON.parse(Buffer.concat(chunks).toString()); if (first) { first = false; process.stdout.write('ready\\n'); } });
  });
  req.on('error', (e) => process.stderr.write(String(e) + '\\n'));
  req.end();
}
once(); setInterval(once, 2000);
`;

/** ms values into fixed buckets (upper bounds, ms), with p50, p99 and max. */
export function latencySummary(
  values: readonly number[],
  bucketsMs: readonly number[] = [5, 10, 25, 50, 100, 250, 500, 1000],
) {
  const sorted = [...values].sort((a, b) => a - b);
  const pct = (q: number) =>
    sorted.length === 0
      ? null
      : round(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number, 2);
  const histogram: Record<string, number> = {};
  for (const le of bucketsMs) histogram[`le${le}ms`] = sorted.filter((v) => v <= le).length;
  histogram.total = sorted.length;
  return { count: sorted.length, p50: pct(0.5), p99: pct(0.99), max: pct(1), histogram };
}

export function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
