/**
 * The agent's server check against real loopback servers: the HTTP check's verdicts
 * (2xx/3xx healthy, 4xx/5xx, refused, a server that never answers), and that it works
 * under `--jitless`, the agent's default Node flag (no WebAssembly, so no `fetch`).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { checkServer } from '../../agent/server-check.ts';

const root = join(import.meta.dirname, '../..');

describe('HTTP server check (node:http)', () => {
  let server: Server;
  let base: string;
  before(async () => {
    server = createServer((req, res) => {
      if (req.url === '/hang') return; // never answers
      const status =
        req.url === '/ok' ? 200 : req.url === '/moved' ? 302 : req.url === '/missing' ? 404 : 500;
      res.writeHead(status, status === 302 ? { location: '/elsewhere' } : {});
      res.end('body\n');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });
  const check = (path: string, timeoutMs = 1_000) =>
    checkServer({ kind: 'http', url: `${base}${path}`, text: `${base}${path}` }, timeoutMs);

  it('is healthy on 2xx and 3xx (redirects are not followed)', async () => {
    assert.deepEqual(await check('/ok'), { ok: true });
    assert.deepEqual(await check('/moved'), { ok: true });
  });
  it('fails on 4xx and 5xx, naming the URL and the status', async () => {
    assert.deepEqual(await check('/missing'), { ok: false, detail: `GET ${base}/missing answered 404` });
    assert.deepEqual(await check('/error'), { ok: false, detail: `GET ${base}/error answered 500` });
  });
  it('fails within its timeout when the server never answers', async () => {
    const t0 = performance.now();
    const result = await check('/hang', 200);
    const tookMs = performance.now() - t0;
    assert.deepEqual(result, { ok: false, detail: `GET ${base}/hang failed: timed out after 200ms` });
    assert.ok(tookMs >= 190 && tookMs < 2_000, `took ${tookMs} ms`);
  });
  it('fails when nothing listens', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const result = await checkServer({ kind: 'http', url: `http://127.0.0.1:${port}/`, text: '' }, 1_000);
    assert.equal(result.ok, false);
    assert.match((result as { detail: string }).detail, /ECONNREFUSED/);
  });
  it('works under --jitless (no WebAssembly: fetch would fail there)', async () => {
    const script = `import { checkServer } from ${JSON.stringify(join(root, 'agent/server-check.ts'))};
      process.stdout.write(JSON.stringify(await checkServer({ kind: 'http', url: ${JSON.stringify(`${base}/ok`)}, text: '' }, 2000)));`;
    // Not spawnSync: the server above runs in this process's event loop.
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--jitless', '--import', 'tsx', '--input-type=module', '-e', script],
      { cwd: root, timeout: 20_000 },
    );
    assert.deepEqual(JSON.parse(stdout), { ok: true });
  });
  it('fetch itself fails under --jitless (what the check above guards against)', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        '--jitless',
        '-e',
        `fetch(${JSON.stringify(`${base}/ok`)}).catch((e) => process.stdout.write(String(e.cause)))`,
      ],
      { timeout: 20_000 },
    );
    assert.match(stdout, /WebAssembly is not defined/);
  });
});
