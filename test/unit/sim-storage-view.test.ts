/**
 * The fencing storage's revocable view (real FUSE: leasehold-fencefs on /dev/fuse; needs
 * root like the simulator): writes through a granted view land in the backing dir; after
 * revoke every operation fails with EIO, also on a descriptor opened before and from a
 * process that was SIGSTOPped across the revoke; the log shows the order; stop() leaves
 * no mount behind.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { accessOrderViolations, revokeBeforeGrantElsewhere } from '../../dev/csi/access-log.ts';
import { FencingStorage, viewLink } from '../../dev/sim/storage/fencing-storage.ts';
import { claimStorage } from '../../dev/sim/storage/storage-leftovers.ts';
import { sleep } from '../../lib/clock.ts';

/** PIDs of leasehold-fencefs processes whose arguments name `root`. */
function fencefsOf(root: string): string[] {
  const r = spawnSync('pgrep', ['-f', `leasehold-fencefs --backing ${root}`], { encoding: 'utf8' });
  return r.stdout.split('\n').filter(Boolean);
}

const mounts = () => readFileSync('/proc/mounts', 'utf8');

const WRITER = `
const fs = require('node:fs');
const fd = fs.openSync(process.argv[1], 'a');
let n = 0;
const t = setInterval(() => {
  try { fs.writeSync(fd, 'line ' + (++n) + '\\n'); console.log('wrote ' + n); }
  catch (err) { console.log('error ' + err.code); clearInterval(t); process.exit(0); }
}, 30);
`;

test('a revoked view fails every operation with EIO, also for a frozen writer that resumes', {
  timeout: 60_000,
}, async () => {
  const root = mkdtempSync(join(tmpdir(), 'leasehold-storage-'));
  const storage = new FencingStorage(root);
  try {
    const view = await storage.grant('pv-a', 'n1');
    assert.equal(realpathSync(viewLink(root, 'pv-a', 'n1')), view);
    assert.equal(await storage.grant('pv-a', 'n1'), view, 'grant is idempotent while live');
    writeFileSync(join(view, 'hello'), 'through the view\n');
    assert.equal(readFileSync(join(root, 'volumes', 'pv-a', 'hello'), 'utf8'), 'through the view\n');

    const writer = spawn(process.execPath, ['-e', WRITER, join(view, 'records')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines: string[] = [];
    createInterface({ input: writer.stdout }).on('line', (l) => lines.push(l));
    const exited = new Promise<void>((resolve) => writer.on('exit', () => resolve()));
    while (lines.length < 3) await sleep(20);
    writer.kill('SIGSTOP');
    await sleep(100);
    const before = readFileSync(join(root, 'volumes', 'pv-a', 'records'), 'utf8');
    await storage.revoke('pv-a', 'n1');
    writer.kill('SIGCONT');
    await exited;
    assert.equal(
      lines.at(-1),
      'error EIO',
      `the resumed writer's next write fails with EIO: ${lines.join(' | ')}`,
    );
    assert.equal(
      readFileSync(join(root, 'volumes', 'pv-a', 'records'), 'utf8'),
      before,
      'nothing the resumed writer wrote reached the volume',
    );
    assert.throws(() => readFileSync(join(view, 'hello')), { code: 'EIO' });
    assert.throws(() => writeFileSync(join(view, 'new'), 'x'), { code: 'EIO' });

    const next = await storage.grant('pv-a', 'n2');
    assert.equal(readFileSync(join(next, 'hello'), 'utf8'), 'through the view\n');
    assert.deepEqual(accessOrderViolations(storage.log), []);
    assert.ok(revokeBeforeGrantElsewhere(storage.log, 'pv-a', 'n1'), JSON.stringify(storage.log));
    assert.ok(storage.log.every((e, i) => i === 0 || e.monoMs >= (storage.log[i - 1]?.monoMs ?? 0)));
  } finally {
    await storage.stop();
  }
  await sleep(200);
  assert.equal(mounts().includes(root), false, `no mount left under ${root}`);
  rmSync(root, { recursive: true, force: true });
});

test('a killed simulator leaves no view mounted and no leasehold-fencefs running', {
  timeout: 60_000,
}, async () => {
  const root = mkdtempSync(join(tmpdir(), 'leasehold-storage-'));
  const script = `
    import { FencingStorage } from ${JSON.stringify(new URL('../../dev/sim/storage/fencing-storage.ts', import.meta.url).href)};
    const s = new FencingStorage(${JSON.stringify(root)});
    await s.grant('pv-a', 'n1');
    console.log('granted');
    setInterval(() => {}, 1000);
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const granted = new Promise<void>((resolve) =>
    createInterface({ input: child.stdout }).on('line', (l) => l === 'granted' && resolve()),
  );
  await granted;
  assert.ok(mounts().includes(root), 'the view is mounted');
  // Marked ours (alive), so that no other test file's storage sweeps this root: what
  // goes must go by leasehold-fencefs's own parent-death signal.
  claimStorage(root);
  child.kill('SIGKILL');
  const deadline = performance.now() + 10_000;
  while (mounts().includes(root) && performance.now() < deadline) await sleep(100);
  assert.equal(mounts().includes(root), false, `no mount left under ${root} after SIGKILL`);
  while (fencefsOf(root).length > 0 && performance.now() < deadline) await sleep(100);
  assert.deepEqual(fencefsOf(root), [], 'no leasehold-fencefs left for that root');
  rmSync(root, { recursive: true, force: true });
});

test('a view whose leasehold-fencefs died counts as revoked, and its mount fails every operation', {
  timeout: 30_000,
}, async () => {
  const root = mkdtempSync(join(tmpdir(), 'leasehold-storage-'));
  const storage = new FencingStorage(root);
  try {
    const view = await storage.grant('pv-a', 'n1');
    writeFileSync(join(view, 'f'), 'x');
    const [pid] = fencefsOf(root);
    assert.ok(pid, 'its leasehold-fencefs runs');
    process.kill(Number(pid), 'SIGKILL');
    while (fencefsOf(root).length > 0) await sleep(20);
    await storage.revoke('pv-a', 'n1');
    assert.deepEqual(
      storage.log.map((e) => e.op),
      ['grant', 'revoke'],
    );
    assert.throws(
      () => readFileSync(join(view, 'f')),
      (err: NodeJS.ErrnoException) => ['ENOTCONN', 'EIO'].includes(err.code ?? ''),
    );
  } finally {
    await storage.stop();
  }
  await sleep(200);
  assert.equal(mounts().includes(root), false, `no mount left under ${root}`);
  rmSync(root, { recursive: true, force: true });
});
