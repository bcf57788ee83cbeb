/**
 * What one proxied connection to a Service does when its backend's node or either of
 * its sockets changes (pure; a transition table, executed by service-proxy.ts).
 *
 * The connection was routed once, when it was opened (service-routing.ts), and stays
 * with that endpoint for its life, as a conntrack entry does: EndpointSlice changes
 * never move or close it. What the client hears then depends on the backend's node:
 *  - node running: the backend's FIN and RST reach the client (a pod deleted or a
 *    server that exits on a healthy node closes its connections), and the client's
 *    reach the backend;
 *  - node crashed, frozen or partitioned ("down"): nothing passes either way, not even
 *    a FIN or RST the backend's socket gave when its process was SIGKILLed: a dead or
 *    unreachable machine sends nothing, so the client must time out on its own;
 *  - the node back (heal): after a crash the machine rebooted and knows no connection,
 *    so the client's next segment is answered with RST: the client is reset. After a
 *    freeze or partition TCP retransmission carries on: held bytes flow and the
 *    connection goes on; a FIN sent meanwhile arrives after them (the closing side
 *    retransmits it), an RST sent meanwhile means that socket is gone, so the other
 *    side is reset (its next segment finds no socket).
 * NB: the client's own TCP peer is the proxy's socket, so while down the client's
 * kernel still gets ACKs for what it sends (the proxy's kernel buffers it): a client
 * relying on TCP_USER_TIMEOUT for unacknowledged data would not trip it here; one
 * relying on an application-level reply timeout (an RPC answer) behaves as in a cluster.
 */

/** How a socket ended: `end` = FIN, `reset` = RST or a socket error (refused, ...). */
export type SideEnd = 'end' | 'reset';

/** The backend node's condition, from the connection's point of view. */
export type NodeCondition = 'running' | 'crashed' | 'frozen' | 'partitioned';

export type ConnectionState =
  | { kind: 'passing' }
  /** Backend node down since `cause`; `upstreamGone`/`clientGone`: how that side ended meanwhile. */
  | {
      kind: 'silent';
      cause: Exclude<NodeCondition, 'running'>;
      upstreamGone: SideEnd | undefined;
      clientGone: SideEnd | undefined;
    }
  | { kind: 'closed' };

export type ConnectionEvent =
  | { kind: 'node'; condition: NodeCondition }
  | { kind: 'upstream'; how: SideEnd }
  | { kind: 'client'; how: SideEnd };

/**
 * Socket actions, executed in order: `hold` stops forwarding (bytes are kept), `resume`
 * forwards again and delivers what was kept (connecting upstream first if the
 * connection never reached its backend), `end-*` passes a FIN, `reset-*` an RST.
 */
export type ConnectionAction =
  | 'hold'
  | 'resume'
  | 'end-client'
  | 'reset-client'
  | 'end-upstream'
  | 'reset-upstream';

export interface Transition {
  state: ConnectionState;
  actions: ConnectionAction[];
}

const CLOSED: ConnectionState = { kind: 'closed' };

/** The state of a connection opened to an endpoint whose node is in `condition`. */
export function initialState(condition: NodeCondition): ConnectionState {
  return condition === 'running'
    ? { kind: 'passing' }
    : { kind: 'silent', cause: condition, upstreamGone: undefined, clientGone: undefined };
}

export function nextState(state: ConnectionState, event: ConnectionEvent): Transition {
  switch (state.kind) {
    case 'closed':
      return { state, actions: [] };
    case 'passing':
      return fromPassing(event);
    case 'silent':
      return fromSilent(state, event);
  }
}

function fromPassing(event: ConnectionEvent): Transition {
  switch (event.kind) {
    case 'node':
      return event.condition === 'running'
        ? { state: { kind: 'passing' }, actions: [] }
        : { state: initialState(event.condition), actions: ['hold'] };
    case 'upstream':
      // A half-close is passed on; the connection is over when both sides are.
      return event.how === 'end'
        ? { state: { kind: 'passing' }, actions: ['end-client'] }
        : { state: CLOSED, actions: ['reset-client'] };
    case 'client':
      return event.how === 'end'
        ? { state: { kind: 'passing' }, actions: ['end-upstream'] }
        : { state: CLOSED, actions: ['reset-upstream'] };
  }
}

function fromSilent(state: Extract<ConnectionState, { kind: 'silent' }>, event: ConnectionEvent): Transition {
  switch (event.kind) {
    case 'upstream':
      return { state: { ...state, upstreamGone: state.upstreamGone ?? event.how }, actions: [] };
    case 'client':
      return { state: { ...state, clientGone: state.clientGone ?? event.how }, actions: [] };
    case 'node': {
      if (event.condition !== 'running') {
        // A crash outranks a freeze or partition: the machine will come back rebooted.
        const cause = event.condition === 'crashed' ? 'crashed' : state.cause;
        return { state: { ...state, cause }, actions: [] };
      }
      // Rebooted: the machine knows no connection; both ends are told so at their next segment.
      if (state.cause === 'crashed') return { state: CLOSED, actions: ['reset-client', 'reset-upstream'] };
      const up = state.upstreamGone;
      const client = state.clientGone;
      // An RST (or a socket that is gone) is answered with RST by the other side's next segment.
      if (up === 'reset' || client === 'reset') {
        const actions: ConnectionAction[] = [];
        if (client !== 'reset') actions.push('reset-client');
        if (up !== 'reset') actions.push('reset-upstream');
        return { state: CLOSED, actions };
      }
      // A FIN is retransmitted after the heal and arrives after the data kept before it.
      const actions: ConnectionAction[] = ['resume'];
      if (up === 'end') actions.push('end-client');
      if (client === 'end') actions.push('end-upstream');
      return { state: { kind: 'passing' }, actions };
    }
  }
}
