/**
 * The demo share server as a real process: it appends numbered records, serves them,
 * continues the sequence after a restart, logs its serving windows, stops serving on
 * SIGTERM (the agent's fence) and rejects bad configuration with exit code 2. A
 * stubborn one (--sigterm-delay) serves on after SIGTERM for its delay, or until SIGKILL.
 */

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { freePort } from '../../dev/net/free-port.ts';
import { readRecords } from '../../dev/share-server/record-file.ts';
import { overlappingWindows, readServingWindows } from '../../dev/share-server/serving-window-log.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { eventually } from '../support/cluster.ts';

const MAIN = join(import.meta.dirname, '../../dist/dev/share-server/main.js');
const dir = mkdtempSync(join(tmpdir(), 'leasehold-share-'));
const children = new Set<ChildProcess>();
after(() => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function run(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [MAIN, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let output = '';
  child.stdout?.on('data', (d) => (output += d));
  child.stderr?.on('data', (d) => (output += d));
  const exited = new Promise<{ code: number | null; output: string }>((resolve) =>
    child.once('exit', (code) => {
      children.delete(child);
      resolve({ code, output });
    }),
  );
  return { child, exited };
}

async function records(port: number, after = 0) {
  const res = await fetch(`http://127.0.0.1:${port}/records?after=${after}`);
  assert.equal(res.status, 200);
  return (await res.json()) as {
    server: string;
    lastSeq: number;
    records: Array<{ seq: number; writer: string }>;
  };
}

test('appends and serves records, continues the sequence after a restart, logs serving windows', async () => {
  const port = await freePort();
  const first = run([`--dir=${dir}`, '--port', String(port), '--id=one'], {});
  const seen = await eventually(
    '30 records from the first server',
    async () => {
      const r = await records(port).catch(() => undefined);
      return r && r.lastSeq >= 30 ? r : undefined;
    },
    20_000,
  );
  assert.equal(seen.server, 'one');
  assert.deepEqual(
    seen.records.map((r) => r.seq),
    Array.from({ length: seen.records.length }, (_, i) => i + 1),
  );
  const health = await fetch(`http://127.0.0.1:${port}/healthz`);
  assert.equal(health.status, 200);

  const sigtermAt = monotonicMs();
  first.child.kill('SIGTERM');
  assert.equal((await first.exited).code, 0);
  await assert.rejects(fetch(`http://127.0.0.1:${port}/healthz`), 'the fenced server must stop answering');
  const lastOfFirst = readRecords(join(dir, 'records.jsonl')).at(-1)?.seq ?? 0;
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(readRecords(join(dir, 'records.jsonl')).at(-1)?.seq, lastOfFirst, 'no record after the fence');

  // A replacement (configured by env this time) continues the sequence.
  const port2 = await freePort();
  const second = run([], { SHARE_SERVER_DIR: dir, SHARE_SERVER_PORT: String(port2), HOSTNAME: 'two' });
  const next = await eventually(
    'records from the second server',
    async () => {
      const r = await records(port2, lastOfFirst).catch(() => undefined);
      return r && r.records.length >= 5 ? r : undefined;
    },
    20_000,
  );
  assert.equal(next.server, 'two');
  assert.equal(next.records[0]?.seq, lastOfFirst + 1);
  assert.equal(next.records[0]?.writer, 'two');
  second.child.kill('SIGTERM');
  assert.equal((await second.exited).code, 0);

  const all = readRecords(join(dir, 'records.jsonl'));
  assert.deepEqual(
    all.map((r) => r.seq),
    Array.from({ length: all.length }, (_, i) => i + 1),
    'no gap, no duplicate',
  );
  const windows = readServingWindows(join(dir, 'serving-windows.jsonl'));
  assert.equal(windows.length, 2);
  assert.deepEqual(
    windows.map((w) => w.id),
    ['one', 'two'],
  );
  assert.ok(windows.every((w) => w.stopMonoMs !== undefined && w.stopMonoMs > w.startMonoMs));
  assert.ok((windows[0]?.stopMonoMs ?? 0) >= sigtermAt, 'the first window ends after the SIGTERM');
  assert.equal(windows[0]?.lastSeq, lastOfFirst);
  assert.equal(windows[1]?.firstSeq, lastOfFirst + 1);
  assert.deepEqual(overlappingWindows(windows), []);
});

test('bad configuration: exit 2 and a message naming the input, the value and the rule', async () => {
  const bad = run([
    '--dir=relative/path',
    '--port=99999',
    '--interval=fast',
    '--bogus',
    '--sigterm-delay=forever',
  ]);
  const { code, output } = await bad.exited;
  assert.equal(code, 2);
  assert.match(
    output,
    /--sigterm-delay="forever": must be a duration from 0 to 10m \(such as 0, 500ms or 2s\) or never/,
  );
  assert.match(output, /--dir="relative\/path": must be an absolute path/);
  assert.match(output, /--port="99999": must be a whole number from 0 to 65535/);
  assert.match(output, /--interval="fast": must be a duration/);
  assert.match(output, /argument "--bogus": unknown/);
  const tooLong = await run([`--dir=${dir}`], { SHARE_SERVER_SIGTERM_DELAY: '11m' }).exited;
  assert.equal(tooLong.code, 2);
  assert.match(tooLong.output, /SHARE_SERVER_SIGTERM_DELAY="11m": must be a duration from 0 to 10m/);
  const missing = await run([]).exited;
  assert.equal(missing.code, 2);
  assert.match(missing.output, /SHARE_SERVER_DIR is not set/);
});

async function healthz(port: number): Promise<number | string> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1_000) });
    await res.body?.cancel();
    return res.status;
  } catch (err) {
    return String((err as Error).cause ?? err);
  }
}

test('--sigterm-delay=never: SIGTERM changes nothing, the window stays open until SIGKILL', async () => {
  const sub = mkdtempSync(join(dir, 'never-'));
  const port = await freePort();
  const server = run([`--dir=${sub}`, `--port=${port}`, '--id=stubborn', '--sigterm-delay=never']);
  await eventually('serving', async () => ((await healthz(port)) === 200 ? true : undefined));
  server.child.kill('SIGTERM');
  const before = (await records(port)).lastSeq;
  await new Promise((r) => setTimeout(r, 1_500));
  assert.equal(await healthz(port), 200, 'still answering 1.5 s after SIGTERM');
  assert.ok((await records(port)).lastSeq > before + 5, 'still appending');
  assert.equal(server.child.exitCode, null, 'still running');
  const open = readServingWindows(join(sub, 'serving-windows.jsonl'));
  assert.equal(open.length, 1);
  assert.equal(open[0]?.stopMonoMs, undefined, 'its window is open');
  const killedAt = monotonicMs();
  server.child.kill('SIGKILL');
  const { code, output } = await server.exited;
  assert.equal(code, null, 'ended by the signal');
  assert.equal(server.child.signalCode, 'SIGKILL');
  assert.match(output, /ignoring SIGTERM/);
  const after = readServingWindows(join(sub, 'serving-windows.jsonl'));
  assert.equal(after[0]?.stopMonoMs, undefined, 'SIGKILL leaves no stop line: open until the kill');
  assert.ok(readRecords(join(sub, 'records.jsonl')).every((r) => r.monoMs < killedAt + 50));
});

test('--sigterm-delay=1s: serves on for the delay after SIGTERM, then stops and exits 0', async () => {
  const sub = mkdtempSync(join(dir, 'delay-'));
  const port = await freePort();
  const server = run([`--dir=${sub}`, `--port=${port}`, '--id=slow'], { SHARE_SERVER_SIGTERM_DELAY: '1s' });
  await eventually('serving', async () => ((await healthz(port)) === 200 ? true : undefined));
  const termAt = monotonicMs();
  server.child.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await healthz(port), 200, 'still serving 0.5 s after SIGTERM');
  server.child.kill('SIGTERM'); // a second SIGTERM does not restart the delay
  const { code } = await server.exited;
  const exitedAt = monotonicMs();
  assert.equal(code, 0);
  const [window] = readServingWindows(join(sub, 'serving-windows.jsonl'));
  const servedOnMs = (window?.stopMonoMs ?? 0) - termAt;
  assert.ok(servedOnMs >= 1_000 && servedOnMs < 1_400, `stopped ${Math.round(servedOnMs)} ms after SIGTERM`);
  assert.ok(exitedAt - termAt < 2_000);
  assert.match(window?.reason ?? '', /SIGTERM \(stopped 1000 ms after it\)/);
});
