/**
 * One connection accepted at a Service address, bound for its life to the endpoint it
 * was routed to: the thin executor of service-connection.ts. Every socket event and
 * every change of the endpoint's node goes through `apply`, which runs the pure
 * transition and then its socket actions (dev/net/tcp-splice.ts), in order.
 * Guarantee: the client hears only what the transition table lets through.
 */
import type { Socket } from 'node:net';
import { monotonicMs } from '../../../lib/clock.ts';
import { TcpSplice } from '../../net/tcp-splice.ts';
import {
  type ConnectionAction,
  type ConnectionEvent,
  type ConnectionState,
  initialState,
  type NodeCondition,
  nextState,
} from './service-connection.ts';
import type { PortEndpoint, ResolvedEndpoint } from './service-routing.ts';

export class ProxiedConnection {
  state: ConnectionState;
  upstreamEvent: string | undefined;
  readonly openedMonoMs = monotonicMs();
  readonly splice: TcpSplice;

  constructor(
    client: Socket,
    readonly servicePort: string,
    readonly endpoint: PortEndpoint,
    condition: NodeCondition,
    private readonly proxy: {
      resolve(e: PortEndpoint): ResolvedEndpoint;
      forget(c: ProxiedConnection): void;
    },
  ) {
    this.state = initialState(condition);
    this.splice = new TcpSplice(client, {
      onEvent: (side, how, detail) => {
        if (side === 'upstream') this.upstreamEvent = detail ? `${how} (${detail})` : how;
        this.apply({ kind: side, how });
      },
      onClosed: () => this.proxy.forget(this),
    });
  }

  apply(event: ConnectionEvent): void {
    const { state, actions } = nextState(this.state, event);
    this.state = state;
    for (const action of actions) this.execute(action);
  }

  private execute(action: ConnectionAction): void {
    const s = this.splice;
    if (action === 'hold') s.hold();
    else if (action === 'end-client') s.endClient();
    else if (action === 'reset-client') s.resetClient();
    else if (action === 'end-upstream') s.endUpstream();
    else if (action === 'reset-upstream') s.resetUpstream();
    else this.resume();
  }

  /** Forwards again; a connection that never reached its backend connects first. */
  private resume(): void {
    const s = this.splice;
    if (!s.connected) {
      const port = this.proxy.resolve(this.endpoint).hostPort;
      if (port === undefined) {
        this.state = { kind: 'closed' };
        s.resetClient();
        return;
      }
      s.connect({ host: '127.0.0.1', port });
    }
    s.resume();
  }
}
