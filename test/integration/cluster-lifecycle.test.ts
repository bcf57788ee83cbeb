/**
 * The local control plane starts side by side with another, fails with one clear
 * line naming the component and its log, and leaves no process behind.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { startCluster } from '../../dev/cluster/cluster.ts';

/** Processes whose command line mentions `needle` (a cluster's temp dir). */
function processesMentioning(needle: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (cmdline.includes(needle)) found.push(`${pid}: ${cmdline.slice(0, 120)}`);
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

describe('local control plane lifecycle', () => {
  it('runs two clusters at once without collision and stops both cleanly', async () => {
    const settled = await Promise.allSettled([startCluster(), startCluster()]);
    const up = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    if (up.length < 2) {
      await Promise.all(up.map((c) => c.stop()));
      assert.fail(
        `a cluster failed to start: ${settled.map((s) => (s.status === 'rejected' ? String(s.reason) : 'ok')).join(' / ')}`,
      );
    }
    const [a, b] = up as [(typeof up)[0], (typeof up)[0]];
    try {
      assert.notEqual(a.server, b.server);
      assert.notEqual(a.dir, b.dir);
      const versions = await Promise.all(
        [a, b].map(
          (c) =>
            new Promise<string>((resolve, reject) =>
              execFile(
                c.kubectl,
                ['--kubeconfig', c.kubeconfigPath, 'get', '--raw', '/version'],
                (err, out) => (err ? reject(err) : resolve(JSON.parse(out).gitVersion)),
              ),
            ),
        ),
      );
      assert.deepEqual(versions, ['v1.36.3', 'v1.36.3']);
      assert.ok(processesMentioning(a.dir).length >= 4, 'cluster a runs its components');
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
    assert.deepEqual(processesMentioning(a.dir), []);
    assert.deepEqual(processesMentioning(b.dir), []);
    assert.equal(existsSync(a.dir), false, 'temp dir removed');
  });

  it('names the component and its log when one exits at start, and leaves nothing running', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'leasehold-bad-cluster-'));
    await assert.rejects(startCluster({ dir, featureGates: { NoSuchFeatureGate: true } }), (err: Error) => {
      assert.match(err.message, /^kube-apiserver exited at start/);
      assert.ok(err.message.includes(join(dir, 'logs', 'kube-apiserver.log')), err.message);
      return true;
    });
    assert.deepEqual(processesMentioning(dir), [], 'etcd was stopped too');
    rmSync(dir, { recursive: true, force: true });
  });

  it('stops and restarts the API server on the same address', async () => {
    const c = await startCluster({ scheduler: false, controllerManager: false });
    try {
      const get = () =>
        new Promise<number>((resolve) =>
          execFile(
            c.kubectl,
            ['--kubeconfig', c.kubeconfigPath, '--request-timeout=2s', 'get', '--raw', '/readyz'],
            (err) => resolve(err ? 1 : 0),
          ),
        );
      await c.stopApiServer();
      assert.equal(await get(), 1, 'API server is down');
      await c.startApiServer();
      assert.equal(await get(), 0, 'API server is back');
    } finally {
      await c.stop();
    }
  });

  it('build script: a missing Go toolchain is one clear line and a non-zero exit', async () => {
    const cache = mkdtempSync(join(tmpdir(), 'leasehold-empty-cache-'));
    const result = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(
        '/bin/bash',
        ['dev/kube/build.sh'],
        { env: { PATH: '/usr/bin:/bin', HOME: cache, LEASEHOLD_CACHE: cache } },
        (err, _o, stderr) => resolve({ code: (err as { code?: number } | null)?.code ?? 0, stderr }),
      ),
    );
    assert.equal(result.code, 1);
    rmSync(cache, { recursive: true, force: true });
    assert.match(result.stderr, /no Go toolchain on PATH/);
  });
});
