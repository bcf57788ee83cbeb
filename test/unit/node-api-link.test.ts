/**
 * The real node's API link (dev/node/api-link.ts) on loopback: an "API server" that
 * records what each connection brings (bytes, FIN, reset) and a "node" client. Proves
 * the modes the faults rely on: stall holds bytes and the FIN until pass; down drops
 * the node's FIN and reset (the API server's connection stays open and silent) and
 * leaving down resets it; close resets at once.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { type ApiLink, startApiLink } from '../../dev/node/api-link.ts';
import { sleep } from '../../lib/clock.ts';

interface Seen {
  data: string;
  ended: boolean;
  reset: boolean;
  closed: boolean;
  socket: Socket;
}

describe('real node API link', () => {
  let server: Server;
  const seen: Seen[] = [];
  let link: ApiLink;

  before(async () => {
    server = createServer({ allowHalfOpen: true }, (socket) => {
      const s: Seen = { data: '', ended: false, reset: false, closed: false, socket };
      seen.push(s);
      socket.on('data', (c) => {
        s.data += c;
      });
      socket.on('end', () => {
        s.ended = true;
      });
      socket.on('error', () => {
        s.reset = true;
      });
      socket.on('close', () => {
        s.closed = true;
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const address = server.address();
    link = await startApiLink({
      host: '127.0.0.1',
      port: typeof address === 'object' && address ? address.port : 0,
    });
  });
  after(async () => {
    await link.close();
    server.close();
  });

  const dial = async () => {
    const client = connect({ host: '127.0.0.1', port: link.port });
    client.on('error', () => {});
    await once(client, 'connect');
    return client;
  };
  const settle = () => sleep(100);

  it('stall holds bytes and the FIN until pass, then delivers them in order', async () => {
    link.setMode('pass');
    const client = await dial();
    client.write('a');
    await settle();
    const s = seen.at(-1) as Seen;
    assert.equal(s.data, 'a');
    link.setMode('stall');
    client.write('b');
    client.end();
    await settle();
    assert.deepEqual([s.data, s.ended, s.closed], ['a', false, false], 'nothing passes while stalled');
    link.setMode('pass');
    await settle();
    assert.deepEqual([s.data, s.ended], ['ab', true], 'held bytes, then the FIN');
  });

  it('down drops the node side’s FIN and reset; the API side stays open and silent until down ends, then it is reset', async () => {
    link.setMode('pass');
    const client = await dial();
    client.write('x');
    await settle();
    const s = seen.at(-1) as Seen;
    let toClient = '';
    client.on('data', (c) => {
      toClient += c;
    });
    link.setMode('down');
    client.write('lost');
    s.socket.write('also lost');
    client.resetAndDestroy(); // the node's kernel resets as its process dies
    await settle();
    assert.deepEqual(
      [s.data, s.ended, s.reset, s.closed],
      ['x', false, false, false],
      'the API server hears nothing',
    );
    assert.equal(toClient, '');
    assert.equal(link.connections().open > 0, true, 'the link keeps the API server’s connection');
    link.setMode('pass'); // the reboot: the machine knows none of its old connections
    await settle();
    assert.equal(s.reset || s.closed, true, 'reset after the node came back');
  });

  it('close resets open connections and refuses new ones with a reset', async () => {
    link.setMode('pass');
    const client = await dial();
    await settle();
    const s = seen.at(-1) as Seen;
    const count = seen.length;
    let clientReset = false;
    client.on('error', () => {
      clientReset = true;
    });
    link.setMode('close');
    await settle();
    assert.equal(clientReset, true, 'the node side is reset');
    assert.equal(s.reset || s.closed, true, 'the API side is reset');
    const late = connect({ host: '127.0.0.1', port: link.port });
    const [err] = (await once(late, 'error')) as [NodeJS.ErrnoException];
    assert.equal(err.code, 'ECONNRESET');
    assert.equal(seen.length, count, 'a connection made while closed never reaches the API server');
    link.setMode('pass');
  });
});
