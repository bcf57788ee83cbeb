/**
 * The control plane's start checks: a health check verifies it is our component that
 * answers (another cluster's, on a port taken meanwhile, must not pass), and a component
 * that died after its check is noticed by the waits that follow.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { makeCerts } from '../../dev/cluster/certs.ts';
import { Component, ComponentError, httpOk } from '../../dev/cluster/component.ts';

const dir = mkdtempSync(join(tmpdir(), 'leasehold-health-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test("a health check passes for a server of our CA, not for another cluster's", async () => {
  mkdirSync(join(dir, 'ours'));
  mkdirSync(join(dir, 'theirs'));
  const [ours, theirs] = await Promise.all([makeCerts(join(dir, 'ours')), makeCerts(join(dir, 'theirs'))]);
  const ca = readFileSync(ours.caCert);
  for (const [who, certs, expected] of [
    ['ours', ours, true],
    ['theirs', theirs, false],
  ] as const) {
    const server = createServer(
      { cert: readFileSync(certs.servingCert), key: readFileSync(certs.servingKey) },
      (_req, res) => res.end('ok'),
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/healthz`;
      assert.equal(await httpOk(url, { ca }), expected, `${who}: healthz accepted = ${expected}`);
    } finally {
      await new Promise((r) => server.close(r));
    }
  }
});

test('a component that exited is an error naming it and its log, once it is known', async () => {
  const c = new Component(
    'short-lived',
    '/bin/sh',
    ['-c', 'echo "listen tcp: bind: address already in use"; exit 1'],
    join(dir, 'short.log'),
  );
  assert.doesNotThrow(() => c.throwIfExited(), 'not started: nothing to report');
  c.start();
  await assert.rejects(
    c.waitReady(async () => false, 10_000),
    (err: unknown) =>
      err instanceof ComponentError &&
      /short-lived exited at start \(code 1/.test(err.message) &&
      err.portTaken,
  );
  assert.throws(() => c.throwIfExited(), /short-lived exited at start/);
});
