/**
 * A loopback TCP forwarder with a switch, for cutting a process off from a server in
 * tests and benchmarks.
 *
 *   const proxy = await startTcpProxy({ target: { host: '127.0.0.1', port } });
 *   proxy.port            // listen here instead of the target
 *   proxy.setMode('stall')
 *
 * Modes:
 *  - pass:  forward both ways.
 *  - close: reset (RST) every open connection at once; new connections are accepted and
 *           reset at once (the client sees ECONNRESET): "the peer is gone".
 *  - stall: keep every connection open but forward nothing, and accept new connections
 *           without reaching the target: "packets are dropped". Bytes are held, not lost:
 *           back in `pass`, held data flows on (like TCP retransmission after a partition
 *           heals), and connections accepted while stalled then reach the target.
 *
 * connections(): { accepted, open } counts client connections since start / right now.
 * close(): stops listening and destroys every connection. Nothing here touches bytes;
 * TLS passes through unchanged.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export type ProxyMode = 'pass' | 'close' | 'stall';

export interface TcpProxyOptions {
  target: { host: string; port: number };
  /** Listen address (default 127.0.0.1) and port (default 0: any free port). */
  host?: string;
  port?: number;
}

export interface TcpProxy {
  readonly port: number;
  readonly mode: ProxyMode;
  setMode(mode: ProxyMode): void;
  connections(): { accepted: number; open: number };
  close(): Promise<void>;
}

/** One client connection and its upstream, with the bytes held while stalled. */
class Link {
  private upstream: Socket | undefined;
  private readonly heldToUpstream: Buffer[] = [];
  private readonly heldToClient: Buffer[] = [];
  private closed = false;

  constructor(
    private readonly client: Socket,
    private readonly target: TcpProxyOptions['target'],
    private readonly modeNow: () => ProxyMode,
    private readonly onClose: () => void,
  ) {
    client.setNoDelay(true);
    client.on('data', (chunk) => this.toUpstream(chunk));
    client.on('end', () => this.upstream?.end());
    client.on('error', () => this.destroy());
    client.on('close', () => this.destroy());
    if (modeNow() === 'pass') this.connectUpstream();
  }

  private connectUpstream(): void {
    if (this.upstream || this.closed) return;
    const upstream = connect(this.target);
    this.upstream = upstream;
    upstream.setNoDelay(true);
    upstream.on('data', (chunk) => this.toClient(chunk));
    upstream.on('end', () => this.client.end());
    upstream.on('error', () => this.destroy());
    upstream.on('close', () => this.destroy());
    this.flush();
  }

  private toUpstream(chunk: Buffer): void {
    if (this.modeNow() !== 'pass' || !this.upstream) this.heldToUpstream.push(chunk);
    else this.upstream.write(chunk);
  }

  private toClient(chunk: Buffer): void {
    if (this.modeNow() !== 'pass') this.heldToClient.push(chunk);
    else this.client.write(chunk);
  }

  /** Called when the mode changes to pass: reach the target and deliver held bytes. */
  resume(): void {
    if (!this.upstream) this.connectUpstream();
    else this.flush();
  }

  private flush(): void {
    if (!this.upstream) return;
    for (const chunk of this.heldToUpstream.splice(0)) this.upstream.write(chunk);
    for (const chunk of this.heldToClient.splice(0)) this.client.write(chunk);
  }

  reset(): void {
    this.client.resetAndDestroy();
    this.upstream?.resetAndDestroy();
    this.destroy();
  }

  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    this.client.destroy();
    this.upstream?.destroy();
    this.onClose();
  }
}

export async function startTcpProxy(opts: TcpProxyOptions): Promise<TcpProxy> {
  let mode: ProxyMode = 'pass';
  let accepted = 0;
  const links = new Set<Link>();
  const server: Server = createServer((client) => {
    accepted++;
    if (mode === 'close') {
      client.on('error', () => {});
      client.resetAndDestroy();
      return;
    }
    const link: Link = new Link(
      client,
      opts.target,
      () => mode,
      () => links.delete(link),
    );
    links.add(link);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
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
    setMode(next: ProxyMode) {
      mode = next;
      if (next === 'close') for (const link of [...links]) link.reset();
      if (next === 'pass') for (const link of [...links]) link.resume();
    },
    connections: () => ({ accepted, open: links.size }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const link of [...links]) link.destroy();
        server.close(() => resolve());
      }),
  };
}
