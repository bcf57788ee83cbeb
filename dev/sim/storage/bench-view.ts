/**
 * Overhead of the fencing storage's view per write, against the backing directory:
 *   node --import tsx dev/sim/storage/bench-view.ts [writes=5000]
 * Appends a share-server-sized record (~120 bytes) with writeSync on one open
 * descriptor (as dev/share-server/record-file.ts does), and with fsync after each; prints
 * JSON with µs per write (p50, p95) for each. Needs root and /dev/fuse.
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FencingStorage } from './fencing-storage.ts';

const writes = Number(process.argv[2] ?? 5000);
const record = `${JSON.stringify({ seq: 123456, server: 'share-a-6d4f9c-xyz12', monoMs: 1234567.89, wall: new Date().toISOString(), pad: 'x'.repeat(20) })}\n`;

function measure(dir: string, fsync: boolean): { p50: number; p95: number } {
  const fd = openSync(join(dir, `bench-${fsync ? 'fsync' : 'plain'}`), 'a');
  const us: number[] = [];
  for (let i = 0; i < writes; i++) {
    const t = process.hrtime.bigint();
    writeSync(fd, record);
    if (fsync) fsyncSync(fd);
    us.push(Number(process.hrtime.bigint() - t) / 1000);
  }
  closeSync(fd);
  us.sort((a, b) => a - b);
  const at = (q: number) => Math.round((us[Math.floor(q * (us.length - 1))] ?? 0) * 10) / 10;
  return { p50: at(0.5), p95: at(0.95) };
}

const root = mkdtempSync(join(tmpdir(), 'leasehold-bench-view-'));
const storage = new FencingStorage(root);
try {
  const view = await storage.grant('pv-bench', 'n1');
  const direct = join(root, 'volumes', 'pv-bench');
  measure(direct, false); // warm up
  measure(view, false);
  const out = {
    writes,
    recordBytes: record.length,
    directUs: measure(direct, false),
    viewUs: measure(view, false),
    directFsyncUs: measure(direct, true),
    viewFsyncUs: measure(view, true),
  };
  console.log(JSON.stringify(out));
} finally {
  await storage.stop();
  if (!readFileSync('/proc/mounts', 'utf8').includes(root)) rmSync(root, { recursive: true, force: true });
}
