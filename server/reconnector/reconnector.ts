/**
 * The reconnector's loop, per share: when the share's EndpointSlice drops an address and
 * lists another, wait until the listed server answers NFS (an RPC NULL call, as the
 * server's own entrypoint checks itself), then end this node's connections that still
 * lead to the gone address (stale-connections.ts decides which, connection-ends.ts ends
 * them). Ending them before the replacement answers would only make the client's
 * reconnect find nobody, and Linux then waits 3 s before its next try.
 *
 * After the replacement answers, the node's table is scanned again a few times
 * (SCAN_OFFSETS_MS): kube-proxy applies the slice's change on its own schedule (up to
 * its minimum sync period, 1 s by default, later on a loaded node), and a client's
 * segment sent before that is translated to the gone address once more.
 *
 * Guarantees: one wait per share at a time (a newer change replaces the wait); a share
 * whose slice is deleted is forgotten; every ended connection is logged once with the
 * share and counted. Not guaranteed: a connection opened before this process started
 * to a server that is gone already (it never saw that address listed) is left to the
 * client's own timeout.
 */
import type { V1EndpointSlice } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import type { Logger } from '../../lib/logger.ts';
import type { EndOutcome } from './connection-ends.ts';
import {
  type ConnectionToEnd,
  type ConntrackEntry,
  connectionsToEnd,
  NO_ROUTING,
  observeListed,
  type ServiceTarget,
  type ShareRouting,
} from './stale-connections.ts';

/** After the replacement answers: when the node's table is scanned (ms). */
export const SCAN_OFFSETS_MS = [0, 500, 1_000, 2_000, 4_000] as const;
/** How often a listed server is asked whether it serves. */
export const PROBE_INTERVAL_MS = 100;

export interface ReconnectorPorts {
  clock: Clock;
  sleep(ms: number): Promise<void>;
  log: Logger;
  /** The share's Service: its cluster addresses and ports. */
  readService(namespace: string, name: string): Promise<ServiceTarget>;
  /** Whether an NFS server answers at address:port. */
  serves(address: string, port: number): Promise<boolean>;
  entriesFrom(replySrc: string): Promise<ConntrackEntry[]>;
  end(connection: ConnectionToEnd): Promise<EndOutcome>;
  localAddresses(): ReadonlySet<string>;
  /** Counts one ended connection (or one that could not be ended). */
  counted(how: ConnectionToEnd['how'], ok: boolean): void;
}

export interface ReconnectorSettings {
  /** How long a gone address is remembered. */
  rememberMs: number;
  /** How long a wait for the listed server to answer lasts before it is given up. */
  waitMs: number;
}

interface ShareState {
  routing: ShareRouting;
  nfsPort: number;
  /** Aborts the share's running wait. */
  wait?: AbortController;
}

/** The share a slice belongs to (the manager's slices carry it as a label). */
export function shareOfSlice(slice: V1EndpointSlice, shareLabel: string): string | undefined {
  const share = slice.metadata?.labels?.[shareLabel];
  return share && slice.metadata?.namespace ? `${slice.metadata.namespace}/${share}` : undefined;
}

/** Every address a slice lists (IPv4 and IPv6 alike; the decision filters). */
export function listedAddresses(slice: V1EndpointSlice): string[] {
  return (slice.endpoints ?? []).flatMap((e) => e.addresses ?? []);
}

/** The slice's NFS port: the one named `nfs`, else 2049 when listed, else the first. */
export function nfsPortOf(slice: V1EndpointSlice): number | undefined {
  const ports = slice.ports ?? [];
  return (
    ports.find((p) => p.name === 'nfs')?.port ??
    ports.find((p) => p.port === 2049)?.port ??
    ports[0]?.port ??
    undefined
  );
}

export class Reconnector {
  private readonly shares = new Map<string, ShareState>();
  private stopped = false;

  constructor(
    private readonly ports: ReconnectorPorts,
    private readonly settings: ReconnectorSettings,
    private readonly shareLabel: string,
  ) {}

  /** Feeds one slice event. */
  sliceSeen(slice: V1EndpointSlice, deleted: boolean): void {
    const key = shareOfSlice(slice, this.shareLabel);
    if (!key || this.stopped) return;
    const prev = this.shares.get(key);
    const nfsPort = nfsPortOf(slice) ?? prev?.nfsPort;
    const change = observeListed(
      prev?.routing ?? NO_ROUTING,
      deleted ? [] : listedAddresses(slice),
      this.ports.clock.now(),
      this.settings.rememberMs,
    );
    if (nfsPort === undefined) return;
    const state: ShareState = {
      routing: change.routing,
      nfsPort,
      ...(prev?.wait ? { wait: prev.wait } : {}),
    };
    this.shares.set(key, state);
    if (change.endStale) {
      state.wait?.abort();
      const wait = new AbortController();
      state.wait = wait;
      void this.endStaleOnceServed(key, wait.signal);
    }
  }

  stop(): void {
    this.stopped = true;
    for (const s of this.shares.values()) s.wait?.abort();
  }

  private async endStaleOnceServed(key: string, signal: AbortSignal): Promise<void> {
    const [namespace, name] = key.split('/') as [string, string];
    const log = this.ports.log.child({ share: key });
    const clock = this.ports.clock;
    const deadline = clock.now() + this.settings.waitMs;
    let serving: string | undefined;
    while (!signal.aborted && clock.now() < deadline) {
      const state = this.shares.get(key);
      if (!state) return;
      for (const address of state.routing.listed)
        if (await this.ports.serves(address, state.nfsPort)) {
          serving = address;
          break;
        }
      if (serving) break;
      await this.ports.sleep(PROBE_INTERVAL_MS);
    }
    if (signal.aborted) return;
    if (!serving) {
      log.warn(
        { waitedMs: this.settings.waitMs },
        'no listed server answered NFS in time: stale connections left to the clients',
      );
      return;
    }
    let service: ServiceTarget;
    try {
      service = await this.ports.readService(namespace, name);
    } catch (err) {
      log.warn({ err }, 'reading the share Service failed: stale connections left to the clients');
      return;
    }
    log.debug({ serving }, 'replacement answers: ending stale connections');
    const started = clock.now();
    for (const offset of SCAN_OFFSETS_MS) {
      const wait = started + offset - clock.now();
      if (wait > 0) await this.ports.sleep(wait);
      if (signal.aborted) return;
      const routing = this.shares.get(key)?.routing;
      if (!routing) return;
      await this.scan(routing, service, log);
    }
  }

  private async scan(routing: ShareRouting, service: ServiceTarget, log: Logger): Promise<void> {
    const local = this.ports.localAddresses();
    for (const gone of routing.gone.keys()) {
      let entries: ConntrackEntry[];
      try {
        entries = await this.ports.entriesFrom(gone);
      } catch (err) {
        log.warn({ err, gone }, 'reading the conntrack table failed');
        continue;
      }
      for (const c of connectionsToEnd(entries, service, routing, local)) {
        const outcome = await this.ports.end(c);
        this.ports.counted(c.how, outcome.ok);
        if (outcome.ok) log.info({ how: c.how }, `ended a connection to the lost server: ${outcome.detail}`);
        else log.warn({ how: c.how }, `could not end a connection to the lost server: ${outcome.detail}`);
      }
    }
  }
}
