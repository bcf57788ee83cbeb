/**
 * One client TCP connection spliced to an upstream, driven from outside: the owner
 * decides (e.g. dev/sim/network/service-connection.ts) and calls the socket actions here; the
 * splice reports what each socket did and decides nothing itself.
 *
 *   const splice = new TcpSplice(client, { onEvent, onClosed });
 *   splice.connect({ host: '127.0.0.1', port });   // or later: hold() first, connect on resume
 *
 * Actions: connect (reach the upstream), hold (forward nothing: the client socket is not
 * read, so its bytes stay in the kernel's buffers; the upstream is still read, into
 * memory, so its FIN or RST is seen and reported), resume (deliver what was kept, then
 * forward again), end/reset of either side (FIN / RST), destroy (both, silently: for
 * shutdown). Events: each side's end (FIN read) or reset (RST or any socket error,
 * a refused connect included) exactly once; `onClosed` once both sockets are closed.
 * Nothing here alters bytes or their order.
 */
import { connect, type Socket } from 'node:net';

export type SpliceSide = 'client' | 'upstream';

export interface SpliceHandlers {
  onEvent(side: SpliceSide, how: 'end' | 'reset', detail?: string): void;
  onClosed(): void;
}

export class TcpSplice {
  private upstream: Socket | undefined;
  private held = false;
  private readonly heldToClient: Buffer[] = [];
  /** Read before the upstream was connected (NB: only if the owner connects late without hold). */
  private readonly heldToUpstream: Buffer[] = [];
  private readonly reported = new Set<SpliceSide>();
  private clientClosed = false;
  private upstreamClosed = true;
  private closedReported = false;

  constructor(
    private readonly client: Socket,
    private readonly handlers: SpliceHandlers,
  ) {
    if (!client.allowHalfOpen)
      throw new Error(
        'TcpSplice: the client socket must allow half-open connections (createServer({ allowHalfOpen: true }))',
      );
    client.setNoDelay(true);
    this.watch(client, 'client');
    client.on('data', (chunk) => {
      if (this.upstream) this.upstream.write(chunk);
      else this.heldToUpstream.push(chunk);
    });
  }

  get connected(): boolean {
    return this.upstream !== undefined;
  }

  /** Reaches the upstream; the client's bytes are read from now on (unless held). */
  connect(target: { host: string; port: number }): void {
    if (this.upstream || this.clientClosed) return;
    const upstream = connect({ ...target, allowHalfOpen: true });
    this.upstream = upstream;
    this.upstreamClosed = false;
    upstream.setNoDelay(true);
    this.watch(upstream, 'upstream');
    for (const chunk of this.heldToUpstream.splice(0)) upstream.write(chunk);
    upstream.on('data', (chunk) => {
      if (this.held) this.heldToClient.push(chunk);
      else this.client.write(chunk);
    });
  }

  hold(): void {
    this.held = true;
    this.client.pause();
  }

  resume(): void {
    this.held = false;
    for (const chunk of this.heldToClient.splice(0)) this.client.write(chunk);
    this.client.resume();
  }

  endClient(): void {
    this.client.end();
  }

  resetClient(): void {
    if (!this.client.destroyed) this.client.resetAndDestroy();
  }

  endUpstream(): void {
    this.upstream?.end();
  }

  resetUpstream(): void {
    if (this.upstream && !this.upstream.destroyed) this.upstream.resetAndDestroy();
  }

  destroy(): void {
    this.client.destroy();
    this.upstream?.destroy();
  }

  private watch(socket: Socket, side: SpliceSide): void {
    // NB: the splice never ends a socket by itself (the client socket must come from a
    // server created with allowHalfOpen): a FIN read is reported, and the owner decides
    // whether the other side hears it.
    const report = (how: 'end' | 'reset', detail?: string) => {
      if (this.reported.has(side)) return;
      this.reported.add(side);
      this.handlers.onEvent(side, how, detail);
    };
    socket.on('end', () => report('end'));
    socket.on('error', (err: NodeJS.ErrnoException) => report('reset', err.code ?? err.message));
    socket.on('close', () => {
      if (side === 'client') this.clientClosed = true;
      else this.upstreamClosed = true;
      if (this.clientClosed && this.upstreamClosed && !this.closedReported) {
        this.closedReported = true;
        this.handlers.onClosed();
      }
    });
  }
}
