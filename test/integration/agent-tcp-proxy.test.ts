/**
 * dev/net/tcp-proxy.ts on loopback (no cluster): pass forwards, close resets open and new
 * connections, stall forwards nothing but keeps connections, and pass after stall
 * delivers what was held. The agent's cut-off tests rely on exactly these semantics.
 */
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { startTcpProxy, type TcpProxy } from '../../dev/net/tcp-proxy.ts';

let echo: Server;
let echoPort: number;
const sockets: Socket[] = [];

before(async () => {
  echo = createServer((s) => {
    sockets.push(s);
    s.on('error', () => {});
    s.pipe(s);
  });
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
  echoPort = (echo.address() as { port: number }).port;
});
after(async () => {
  for (const s of sockets) s.destroy();
  await new Promise<void>((resolve) => echo.close(() => resolve()));
});

function open(proxy: TcpProxy): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: proxy.port }, () => resolve(socket));
    socket.once('error', reject);
  });
}

/** The text received within `ms`, or what came before an error or close. */
function receive(socket: Socket, ms: number): Promise<{ text: string; error: string | undefined }> {
  return new Promise((resolve) => {
    let text = '';
    let error: string | undefined;
    const done = () => resolve({ text, error });
    socket.on('data', (chunk) => {
      text += chunk.toString();
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      error = err.code;
    });
    socket.once('close', done);
    setTimeout(done, ms);
  });
}

describe('tcp proxy', () => {
  it('forwards both ways in pass mode and counts connections', async () => {
    const proxy = await startTcpProxy({ target: { host: '127.0.0.1', port: echoPort } });
    after(() => proxy.close());
    const socket = await open(proxy);
    const got = receive(socket, 300);
    socket.write('hello');
    assert.equal((await got).text, 'hello');
    assert.deepEqual(proxy.connections(), { accepted: 1, open: 1 });
    socket.destroy();
  });

  it('close resets open connections and new ones', async () => {
    const proxy = await startTcpProxy({ target: { host: '127.0.0.1', port: echoPort } });
    after(() => proxy.close());
    const socket = await open(proxy);
    const got = receive(socket, 2_000);
    proxy.setMode('close');
    assert.equal(proxy.mode, 'close');
    assert.equal((await got).error, 'ECONNRESET');
    const late = connect({ host: '127.0.0.1', port: proxy.port });
    const lateResult = await receive(late, 2_000);
    assert.equal(lateResult.error, 'ECONNRESET');
    assert.equal(proxy.connections().open, 0);
  });

  it('stall holds bytes without closing; pass delivers them, also for connections made while stalled', async () => {
    const proxy = await startTcpProxy({ target: { host: '127.0.0.1', port: echoPort } });
    after(() => proxy.close());
    const before = await open(proxy);
    proxy.setMode('stall');
    const during = await open(proxy);
    const gotBefore = receive(before, 1_000);
    const gotDuring = receive(during, 1_000);
    before.write('one');
    during.write('two');
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(before.destroyed, false);
    assert.equal(during.destroyed, false);
    proxy.setMode('pass');
    assert.deepEqual(await gotBefore, { text: 'one', error: undefined });
    assert.deepEqual(await gotDuring, { text: 'two', error: undefined });
    before.destroy();
    during.destroy();
  });

  it('stall forwards nothing while stalled', async () => {
    const proxy = await startTcpProxy({ target: { host: '127.0.0.1', port: echoPort } });
    after(() => proxy.close());
    const socket = await open(proxy);
    proxy.setMode('stall');
    const got = receive(socket, 500);
    socket.write('silence');
    assert.deepEqual(await got, { text: '', error: undefined });
    socket.destroy();
  });
});
