/**
 * The wire between one real node and the API server: a TCP forwarder on host loopback
 * that the node's API relay (leasehold-netns-relay, inside the node's namespace)
 * dials instead of the API server, with the switch the node's faults throw. Every
 * byte the node sends the API server (kubelet, kube-proxy, pods through the
 * `kubernetes` Service) crosses it.
 *
 * Modes:
 *  - pass:  forward both ways.
 *  - close: reset (RST) every open connection on both sides at once; new connections
 *           are reset at once: "the peer is gone" (a partition the routers answer).
 *  - stall: forward nothing and hold it: bytes, and a FIN or reset of either side,
 *           wait until `pass`, then flow in order; new connections are accepted and
 *           reach the API server only in `pass`: "packets are dropped, TCP retries".
 *  - down:  the node's machine is dead: what its side sends, FIN and reset included,
 *           is dropped, and what the API server sends is dropped; the API server's
 *           connections stay open and silent (no FIN, no RST, as from a machine that
 *           lost power). Leaving `down` resets both sides of every connection: the
 *           rebooted machine knows none of them.
 *
 * NB: the API server's TCP peer is this forwarder's socket, so in stall and down its
 * kernel still gets ACKs for what it sends (as with dev/net/tcp-proxy.ts): a client
 * relying on TCP_USER_TIMEOUT does not trip; an application-level timeout (a watch
 * going silent, an unanswered request) behaves as in a cluster.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export type LinkMode = 'pass' | 'close' | 'stall' | 'down';

export interface ApiLink {
  readonly port: number;
  readonly mode: LinkMode;
  setMode(mode: LinkMode): void;
  /** Client connections accepted since start, and open now. */
  connections(): { accepted: number; open: number };
  close(): Promise<void>;
}

type Held = { data: Buffer } | { end: true } | { reset: true };

class Conn {
  private upstream: Socket | undefined;
  private readonly toUp: Held[] = [];
  private readonly toNode: Held[] = [];
  private closed = false;

  constructor(
    private readonly node: Socket,
    private readonly target: { host: string; port: number },
    private readonly mode: () => LinkMode,
    private readonly onClose: () => void,
  ) {
    node.setNoDelay(true);
    node.on('data', (data) => this.send('up', { data }));
    node.on('end', () => this.send('up', { end: true }));
    node.on('error', () => this.send('up', { reset: true }));
    node.on('close', () => this.send('up', { reset: true }));
    if (mode() === 'pass') this.dial();
  }

  private dial(): void {
    if (this.upstream || this.closed) return;
    const up = connect(this.target);
    this.upstream = up;
    up.setNoDelay(true);
    up.on('data', (data) => this.send('node', { data }));
    up.on('end', () => this.send('node', { end: true }));
    up.on('error', () => this.send('node', { reset: true }));
    up.on('close', () => this.send('node', { reset: true }));
  }

  private send(to: 'up' | 'node', what: Held): void {
    const mode = this.mode();
    if (this.closed || mode === 'down') return;
    const queue = to === 'up' ? this.toUp : this.toNode;
    if (mode !== 'pass' || !this.upstream || queue.length > 0) queue.push(what);
    else this.deliver(to, what);
  }

  private deliver(to: 'up' | 'node', what: Held): void {
    const dst = to === 'up' ? this.upstream : this.node;
    if (!dst || this.closed) return;
    if ('data' in what) {
      if (!dst.writableEnded) dst.write(what.data);
    } else if ('end' in what) dst.end();
    // A side that closed takes the connection with it; its peer learns at once.
    else this.destroy();
  }

  /** Back in pass: reach the API server if not yet, then deliver what was held, in order. */
  resume(): void {
    this.dial();
    for (const [to, queue] of [
      ['up', this.toUp],
      ['node', this.toNode],
    ] as const)
      for (const what of queue.splice(0)) this.deliver(to, what);
  }

  reset(): void {
    if (this.closed) return;
    this.node.resetAndDestroy();
    this.upstream?.resetAndDestroy();
    this.destroy();
  }

  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    this.node.destroy();
    this.upstream?.destroy();
    this.onClose();
  }
}

export async function startApiLink(target: { host: string; port: number }): Promise<ApiLink> {
  let mode: LinkMode = 'pass';
  let accepted = 0;
  const conns = new Set<Conn>();
  const server: Server = createServer((socket) => {
    accepted++;
    socket.on('error', () => {});
    if (mode === 'close' || mode === 'down') {
      // down: nothing of the dead node should dial; if something does, it gets nothing.
      if (mode === 'close') socket.resetAndDestroy();
      else socket.destroy();
      return;
    }
    const conn: Conn = new Conn(
      socket,
      target,
      () => mode,
      () => conns.delete(conn),
    );
    conns.add(conn);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    get mode() {
      return mode;
    },
    setMode(next: LinkMode) {
      const was = mode;
      mode = next;
      if (next === 'close' || (was === 'down' && next !== 'down')) for (const c of [...conns]) c.reset();
      if (next === 'pass') for (const c of [...conns]) c.resume();
    },
    connections: () => ({ accepted, open: conns.size }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const c of [...conns]) c.destroy();
        server.close(() => resolve());
      }),
  };
}
